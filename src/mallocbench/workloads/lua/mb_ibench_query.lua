-- The qr/qp steps: thread 0 (and any thread past 2) runs the queries as sysbench events;
-- thread 1 inserts and thread 2 deletes `ibench-rate` rows/s each, outside the event
-- loop, so events, latencies and `ibench_queries` are the queries' alone. Each writer
-- reports the rows it wrote and its seconds; `analysis.sla` compares them to the target.
require("mb_ibench")

local queries, query_started = 0, nil
local delete_batch

function init()
  ib.with_connection(function() ib.ensure(true) end)
end

local function writer_count() return math.min(sysbench.opt.threads - 1, 2) end

local base_thread_init = thread_init

-- The deleters read where the table starts here, before the barrier that releases all
-- threads together: read later, an insert could already have moved the highest id and
-- the following deleter would stay a batch behind for the whole step.
function thread_init()
  base_thread_init()
  if ib.tid() == 1 and writer_count() == 1 then
    delete_batch = ib.deleter()
  elseif ib.tid() == 2 and writer_count() >= 2 then
    delete_batch = ib.following_deleter()
  end
end

local default_thread_run = thread_run

local function insert_batch()
  ib.insert_rows(ib.batch())
  return ib.batch()
end

function thread_run(thread_id)
  local writers = writer_count()
  if thread_id == 1 and writers >= 1 then
    -- With a single writer it deletes too, right after each insert, on its connection.
    local delete_oldest = delete_batch
    local rows, seconds = ib.paced_writer(thread_id, function()
      local written = insert_batch()
      if delete_oldest then delete_oldest() end
      return written
    end)
    local metrics = {ibench_target_rate = sysbench.opt.ibench_rate,
      ibench_insert_rows = rows, ibench_seconds = seconds}
    if delete_oldest then
      metrics.ibench_delete_rows, metrics.ibench_delete_seconds = rows, seconds
    end
    mb.report_metrics(metrics)
  elseif thread_id == 2 and writers >= 2 then
    local rows, seconds = ib.paced_writer(thread_id, delete_batch)
    mb.report_metrics({ibench_delete_rows = rows, ibench_delete_seconds = seconds})
  else
    query_started = ib.now()
    default_thread_run(thread_id)
    if thread_id == 0 then
      mb.report_metrics({ibench_queries = queries,
        ibench_query_seconds = ib.now() - query_started})
    else
      mb.report_metrics({ibench_queries = queries})
    end
  end
end

function ib.count_query() queries = queries + 1 end
