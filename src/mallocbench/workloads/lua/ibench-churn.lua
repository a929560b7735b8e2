-- l.i1 / l.i2: as fast as possible, each event inserts `ibench-batch` rows (50 for
-- l.i1, 5 for l.i2) and deletes as many of the oldest in one transaction, so the table
-- keeps its size while all three secondary indexes are maintained.
require("mb_common")
require("mb_ibench")

local inserted, started, delete_oldest = 0, nil, nil

function init()
  ib.with_connection(function() ib.ensure(true) end)
end

function event()
  started = started or ib.now()
  delete_oldest = delete_oldest or ib.deleter()
  mb.query("BEGIN")
  ib.insert_rows(ib.batch())
  delete_oldest()
  mb.query("COMMIT")
  inserted = inserted + ib.batch()
end

local base_thread_done = thread_done

function thread_done()
  if started and not mb.explaining then
    mb.report_metrics({ibench_insert_rows = inserted, ibench_delete_rows = inserted,
      ibench_seconds = ib.now() - started})
  end
  base_thread_done()
end
