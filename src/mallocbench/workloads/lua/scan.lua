-- scan: a full table scan that returns nothing, so the cost is reading every row.
-- Rows scanned are reported as the metric `scan_rows` (table_size per event: the rows
-- the table was loaded with), so a report can show rows scanned per second.
require("mb_common")

local scans = 0

function event()
  mb.query(string.format("SELECT * FROM sbtest%d WHERE LENGTH(c) < 0", mb.random_table()))
  scans = scans + 1
end

local base_thread_done = thread_done

function thread_done()
  if not mb.explaining then mb.report_metrics({scan_rows = scans * mb.table_size()}) end
  base_thread_done()
end
