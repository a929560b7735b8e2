// Draws every chart described in #mb-charts, then sets data-charts-rendered on <body>
// to the number drawn so tests (and scripts) can tell the page is complete.
(function () {
  "use strict";
  var body = document.body;
  function fail(message) {
    body.setAttribute("data-charts-error", message);
    console.error("mallocbench report: " + message);
  }
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
})();
