-- l.i0: (re)create purchases_index and load it in primary-key order, 1000 rows per
-- INSERT, then stop: the step is a fixed amount of work, timed from its first row.
require("mb_common")
require("mb_ibench")

local LOAD_BATCH = 1000
local loaded, target, started = 0, 0, nil

function init()
  ib.with_connection(ib.create_table)
end

local base_thread_init = thread_init

function thread_init()
  base_thread_init()
  target = ib.load_rows()
end

function event()
  -- One loader: more threads would interleave ids and the load would not be in PK order.
  if ib.tid() ~= 0 or loaded >= target then return true end
  started = started or ib.now()
  local count = math.min(LOAD_BATCH, target - loaded)
  ib.insert_rows(count)
  loaded = loaded + count
end

local base_thread_done = thread_done

function thread_done()
  if started and not mb.explaining then
    mb.report_metrics({ibench_insert_rows = loaded, ibench_seconds = ib.now() - started})
  end
  base_thread_done()
end
