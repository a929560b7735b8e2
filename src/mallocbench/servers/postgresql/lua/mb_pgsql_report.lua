-- mallocbench: the harness's report lines for sysbench's own OLTP scripts, which the
-- pg_<script>.lua wrappers load after the script. One JSON object per line, "MBSTAT "
-- per interval and "MBFINAL " at the end, as the packaged MariaDB steps print them, so
-- one reader (workloads/sysbench.py) takes both.
local function emit(prefix, stat)
  io.stdout:write(string.format(
    '%s {"interval":%.6f,"total":%.6f,"events":%d,"reads":%d,"writes":%d,"other":%d,' ..
    '"errors":%d,"reconnects":%d,"latency_pct_s":%.9f,"threads_running":%d}\n',
    prefix, stat.time_interval, stat.time_total, stat.events, stat.reads, stat.writes,
    stat.other, stat.errors, stat.reconnects, stat.latency_pct, stat.threads_running))
  io.stdout:flush()
end

function sysbench.hooks.report_intermediate(stat) emit("MBSTAT", stat) end
function sysbench.hooks.report_cumulative(stat) emit("MBFINAL", stat) end
