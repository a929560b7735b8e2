-- The insert benchmark (after iibench): one table, purchases_index, that steps load
-- (l.i0), index (l.x), churn with inserts and deletes (l.i1, l.i2) and query while
-- background writers hold a target rate (qr*, qp*). The table is not in the golden
-- datadir, so every step can build what it needs: a step run alone (say qr100) first
-- loads the table and adds the indexes, untimed, in init().
local ffi = require("ffi")  -- declarations: mb_common

local opts = sysbench.cmdline.options
opts.ibench_rows = {"Rows l.i0 loads (0: tables x table_size)", 0}
opts.ibench_batch = {"Rows per transaction of the insert benchmark's writers", 10}
opts.ibench_rate = {"Target rows/s inserted (and deleted) in the background of qr/qp", 100}

ib = {}

ib.TABLE = "purchases_index"
ib.INDEXES = {
  {name = "marketsegment", columns = {"productid", "customerid", "price"}},
  {name = "registersegment", columns = {"cashregisterid", "customerid", "price"}},
  {name = "pdc", columns = {"price", "dateandtime", "customerid"}},
}
-- iibench's value domains; price grows with customerid so pdc is not random in price.
local CASHREGISTERS, PRODUCTS, CUSTOMERS, MAX_PRICE = 1000, 10000, 100000, 500.0
ib.MAX_PRICE = math.floor((MAX_PRICE + CUSTOMERS) / 100)

ib.now = mb.now
ib.sleep = mb.sleep

function ib.tid() return sysbench.tid or 0 end
function ib.batch() return sysbench.opt.ibench_batch end

function ib.load_rows()
  local rows = sysbench.opt.ibench_rows
  if rows > 0 then return rows end
  return sysbench.opt.tables * sysbench.opt.table_size
end

local function scalar(sql)
  return tonumber((mb.con:query_row(sql)))
end

function ib.table_exists()
  return scalar(string.format(
    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() " ..
    "AND table_name = '%s'", ib.TABLE)) > 0
end

function ib.index_exists(name)
  return scalar(string.format(
    "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() " ..
    "AND table_name = '%s' AND index_name = '%s'", ib.TABLE, name)) > 0
end

function ib.create_table()
  mb.con:query("DROP TABLE IF EXISTS " .. ib.TABLE)
  mb.con:query(string.format([[
CREATE TABLE %s (
  transactionid BIGINT NOT NULL AUTO_INCREMENT,
  dateandtime DATETIME NOT NULL,
  cashregisterid INT NOT NULL,
  customerid INT NOT NULL,
  productid INT NOT NULL,
  price FLOAT NOT NULL,
  data VARCHAR(4000) NOT NULL,
  PRIMARY KEY (transactionid)
) ENGINE=%s]], ib.TABLE, sysbench.opt.engine))
end

local DATA_PATTERN = string.rep("@", 10)

local function row_values()
  local customer = sysbench.rand.uniform(0, CUSTOMERS - 1)
  local price = (sysbench.rand.uniform_double() * MAX_PRICE + customer) / 100.0
  return string.format("(NOW(), %d, %d, %d, %.2f, '%s')",
    sysbench.rand.uniform(0, CASHREGISTERS - 1), customer,
    sysbench.rand.uniform(0, PRODUCTS - 1), price, sysbench.rand.string(DATA_PATTERN))
end

-- One multi-row INSERT; auto-increment ids make every batch an append in PK order.
function ib.insert_rows(count)
  local values = {}
  for i = 1, count do values[i] = row_values() end
  mb.query(string.format(
    "INSERT INTO %s (dateandtime, cashregisterid, customerid, productid, price, data) " ..
    "VALUES %s", ib.TABLE, table.concat(values, ", ")))
end

mb.statement("ib_delete", function()
  return string.format(
    "DELETE FROM %s WHERE transactionid >= ? ORDER BY transactionid LIMIT %d",
    ib.TABLE, ib.batch())
end, mb.int_params(1))

-- The oldest rows go first, so the deletes chase the inserts through the primary key as
-- in iibench. `low` only ever trails the true minimum (ids have gaps), so it bounds the
-- search without skipping a row. Returns a function that deletes one batch and returns
-- the rows it deleted.
function ib.deleter()
  local low = scalar(string.format("SELECT COALESCE(MIN(transactionid), 1) FROM %s", ib.TABLE))
  return function()
    mb.execute("ib_delete", 1, {low})
    low = low + ib.batch()
    return ib.batch()
  end
end

-- A deleter on its own connection must not outrun the inserter (it would empty the table
-- and count rows it never found): it deletes only as many rows as the inserts have added
-- since it started, judged by how far the highest id has moved, and else deletes nothing.
function ib.following_deleter()
  local delete_batch = ib.deleter()
  local top = string.format("SELECT COALESCE(MAX(transactionid), 0) FROM %s", ib.TABLE)
  local start_max = scalar(top)
  local deleted, allowed = 0, 0
  return function()
    if deleted + ib.batch() > allowed then
      allowed = scalar(top) - start_max
      if deleted + ib.batch() > allowed then return 0 end
    end
    deleted = deleted + delete_batch()
    return ib.batch()
  end
end

function ib.add_index(index)
  mb.query(string.format("ALTER TABLE %s ADD INDEX %s (%s)", ib.TABLE, index.name,
    table.concat(index.columns, ", ")))
end

-- Runs `fn` on a connection of its own: for sysbench's init(), which runs once in the
-- main thread before any worker starts, so set-up there cannot race the workers.
function ib.with_connection(fn)
  local drv = sysbench.sql.driver()
  local saved = mb.con
  mb.con = drv:connect()
  fn()
  mb.con:disconnect()
  mb.con = saved
end

-- Untimed set-up for a step run without the steps before it.
function ib.ensure(with_indexes)
  if not ib.table_exists() then
    ib.create_table()
    local left = ib.load_rows()
    while left > 0 do
      ib.insert_rows(math.min(1000, left))
      left = left - 1000
    end
  end
  if with_indexes then
    for _, index in ipairs(ib.INDEXES) do
      if not ib.index_exists(index.name) then ib.add_index(index) end
    end
  end
end

-- Rate-limited writer for the qr/qp steps: batch k is due at start + k * batch / rate;
-- a writer that falls behind does not sleep, so the achieved rate shows what the server
-- could sustain. Sleeps are sliced so the writer stops with the step. `write_batch`
-- returns the rows it wrote (0: nothing to do yet, try again shortly). Writers run
-- outside sysbench's event loop, so an ignored error (deadlock) is retried here.
function ib.paced_writer(thread_id, write_batch)
  local rate = sysbench.opt.ibench_rate
  local batch = ib.batch()
  local start = ib.now()
  local done, rows = 0, 0
  while ffi.C.sb_more_events(thread_id) do
    local wait = start + done * batch / rate - ib.now()
    if wait > 0 then
      ib.sleep(math.min(wait, 0.05))
    else
      local ok, written = pcall(write_batch)
      if not ok then
        if type(written) ~= "table" or written.errcode ~= sysbench.error.RESTART_EVENT then
          error(written, 0)
        end
        mb.con:query("ROLLBACK")
      elseif written > 0 then
        done, rows = done + 1, rows + written
      else
        ib.sleep(0.005)
      end
    end
  end
  return rows, ib.now() - start
end
