// Draws every chart described in #mb-charts, then sets data-charts-rendered on <body>
// to the number drawn so tests (and scripts) can tell the page is complete. plotly.js
// comes from a file beside the page (mbDrawCharts on load) or, in a self-contained
// page, from a gzipped copy inside it (mbInflatePlotly).
function mbChartsFailed(message) {
  "use strict";
  document.body.setAttribute("data-charts-error", message);
  document.querySelectorAll("[data-chart]").forEach(function (el) {
    el.textContent = "Chart not drawn: " + message;
  });
  console.error("mallocbench report: " + message);
}

function mbInflatePlotly() {
  "use strict";
  if (typeof DecompressionStream === "undefined") {
    mbChartsFailed("this browser cannot unpack the embedded plotly.js (no DecompressionStream)");
    return;
  }
  var text = document.getElementById("mb-plotly-gz").textContent.trim();
  var binary = atob(text);
  var bytes = new Uint8Array(binary.length);
  for (var i = 0; i < binary.length; i++) { bytes[i] = binary.charCodeAt(i); }
  var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  new Response(stream).text().then(function (source) {
    var script = document.createElement("script");
    script.textContent = source;
    document.head.appendChild(script);
    mbDrawCharts();
  }, function (e) { mbChartsFailed("the embedded plotly.js did not unpack: " + e); });
}

function mbDrawCharts() {
  "use strict";
  var body = document.body;
  var fail = mbChartsFailed;
  if (typeof Plotly === "undefined") { fail("plotly.js did not load"); return; }
  var specs;
  try {
    specs = JSON.parse(document.getElementById("mb-charts").textContent);
  } catch (e) { fail("chart data is not JSON: " + e); return; }
  var config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  var drawn = 0;
  var pending = specs.map(function (spec) {
    var el = document.getElementById(spec.id);
    if (!el) { fail("no element for chart " + spec.id); return Promise.resolve(); }
    return Plotly.newPlot(el, spec.data, spec.layout, config).then(function () {
      drawn += 1;
      el.setAttribute("data-rendered", "1");
    });
  });
  Promise.all(pending).then(function () {
    body.setAttribute("data-charts-rendered", String(drawn));
  }, function (e) { fail("a chart failed: " + e); });
  // Printing lays charts out at the paper's width, not the window's.
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("[data-chart]").forEach(function (el) { Plotly.Plots.resize(el); });
  });
}
