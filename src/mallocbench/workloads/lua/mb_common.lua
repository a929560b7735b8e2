-- mallocbench: the part every step script shares.
-- Schema: sbtest<N>(id INT PK AUTO_INCREMENT, k INT, c CHAR(120), pad CHAR(60)) with
-- secondary index k_<N>(k). Steps pick a random table per event and uniform keys.
-- Measurements leave through the report hooks as one JSON object per line, prefixed
-- "MBSTAT " per interval and "MBFINAL " at the end, so the harness never scrapes prose.

sysbench.cmdline.options = {
  tables = {"Number of tables", 1},
  table_size = {"Rows per table", 10000},
  range = {"Keys per IN-list, or width of a BETWEEN range", 100},
  engine = {"Storage engine for CREATE TABLE", "InnoDB"},
  batch_rows = {"Rows per INSERT while loading", 1000},
  secondary = {"Create the secondary index k_N(k) while loading", true},
}

mb = {}

local C_PATTERN = string.rep("###########-", 9) .. "###########"
local PAD_PATTERN = string.rep("###########-", 4) .. "###########"

function mb.table_count() return sysbench.opt.tables end
function mb.table_size() return sysbench.opt.table_size end
function mb.range() return sysbench.opt.range end

function mb.random_table() return sysbench.rand.uniform(1, sysbench.opt.tables) end
function mb.random_id() return sysbench.rand.default(1, sysbench.opt.table_size) end
function mb.random_c() return sysbench.rand.string(C_PATTERN) end
-- The loader draws k uniformly from 1..table_size, so a random k has the id's domain.
mb.random_k = mb.random_id

function mb.random_ids(count)
  local ids = {}
  for i = 1, count do ids[i] = mb.random_id() end
  return ids
end
function mb.random_pad() return sysbench.rand.string(PAD_PATTERN) end

-- Loading ------------------------------------------------------------------------------

local function create_table(con, n)
  con:query(string.format([[
CREATE TABLE IF NOT EXISTS sbtest%d (
  id INT NOT NULL AUTO_INCREMENT,
  k INT NOT NULL DEFAULT 0,
  c CHAR(120) NOT NULL DEFAULT '',
  pad CHAR(60) NOT NULL DEFAULT '',
  PRIMARY KEY (id)
) ENGINE=%s]], n, sysbench.opt.engine))
  local rows = sysbench.opt.table_size
  local batch = sysbench.opt.batch_rows
  local id = 1
  while id <= rows do
    local values = {}
    local last = math.min(id + batch - 1, rows)
    for i = id, last do
      values[#values + 1] = string.format("(%d, %d, '%s', '%s')", i,
        sysbench.rand.uniform(1, rows), mb.random_c(), mb.random_pad())
    end
    con:query(string.format("INSERT INTO sbtest%d (id, k, c, pad) VALUES %s", n,
      table.concat(values, ",")))
    id = last + 1
  end
  if sysbench.opt.secondary then
    con:query(string.format("CREATE INDEX k_%d ON sbtest%d (k)", n, n))
  end
  con:query(string.format("ANALYZE TABLE sbtest%d", n))
end

function mb.cmd_prepare()
  local drv = sysbench.sql.driver()
  local con = drv:connect()
  -- Tables are spread over the prepare threads so a multi-table load uses every core.
  for n = sysbench.tid % sysbench.opt.threads + 1, sysbench.opt.tables, sysbench.opt.threads do
    create_table(con, n)
  end
  con:disconnect()
end

-- `explain` runs one event on one connection with every statement replaced by its
-- EXPLAIN, so tests (and users) see the plans of exactly the SQL a step sends.
function mb.cmd_explain()
  if init then init() end
  if thread_init then thread_init() end
  mb.explaining = true
  event(0)
  mb.explaining = false
  if thread_done then thread_done() end
  if done then done() end
end

sysbench.cmdline.commands = {
  prepare = {mb.cmd_prepare, sysbench.cmdline.PARALLEL_COMMAND},
  explain = {mb.cmd_explain},
}

-- Statements ---------------------------------------------------------------------------
-- Each step declares its statements once; they are prepared per connection and table
-- on first use, with every parameter an INT or a CHAR bound by position. Options are not
-- parsed yet when a script is loaded, so `param_types` may be a function called later.

local INT = sysbench.sql.type.INT
local CHAR = sysbench.sql.type.CHAR

local statements = {}   -- name -> {sql = function(table_no) ... end, params = {types}}
local prepared = {}     -- per thread: prepared[name][table_no] = {stmt, params}

function mb.statement(name, sql_for_table, param_types)
  statements[name] = {sql = sql_for_table, params = param_types}
end

function mb.int_params(count)
  local types = {}
  for i = 1, count do types[i] = {INT} end
  return types
end

function mb.placeholders(count)
  return string.rep("?, ", count - 1) .. "?"
end

-- print() writes its arguments and the newline in separate calls, so lines from two
-- threads can interleave; one write of the whole line is atomic under stdio's lock.
function mb.emit(line)
  io.stdout:write(line .. "\n")
  io.stdout:flush()
end

function mb.json_string(text)
  return '"' .. text:gsub('[%c"\\]', function(ch)
    return string.format("\\u%04x", ch:byte())
  end) .. '"'
end

local EXPLAINABLE = {select = true, update = true, delete = true, insert = true}

local function explain(sql)
  local verb = sql:match("^%s*(%a+)")
  if verb == nil or not EXPLAINABLE[verb:lower()] then return end
  local rs = mb.con:query("EXPLAIN " .. sql)
  local rows = {}
  for _ = 1, rs.nrows do
    local row = rs:fetch_row()
    local cells = {}
    for i = 1, rs.nfields do
      cells[i] = row[i] == nil and "null" or mb.json_string(tostring(row[i]))
    end
    rows[#rows + 1] = "[" .. table.concat(cells, ",") .. "]"
  end
  mb.emit("MBEXPLAIN {\"sql\":" .. mb.json_string(sql) .. ',"rows":[' ..
    table.concat(rows, ",") .. "]}")
end

-- Parameters are bound by position, so putting the values in the text in order gives the
-- statement the server would run.
local function inline(sql, values)
  local i = 0
  return (sql:gsub("%?", function()
    i = i + 1
    local v = values[i]
    if type(v) == "number" then
      return v == math.floor(v) and string.format("%d", v) or string.format("%.6f", v)
    end
    return "'" .. tostring(v):gsub("['\\]", "\\%0") .. "'"
  end))
end

function mb.execute(name, table_no, values)
  if mb.explaining then
    return explain(inline(statements[name].sql(table_no), values))
  end
  local by_table = prepared[name]
  if by_table == nil then
    by_table = {}
    prepared[name] = by_table
  end
  local entry = by_table[table_no]
  if entry == nil then
    local spec = statements[name]
    local stmt = mb.con:prepare(spec.sql(table_no))
    local types = spec.params
    if type(types) == "function" then types = types() end
    local params = {}
    for i, t in ipairs(types) do
      params[i] = stmt:bind_create(t[1], t[2])
    end
    if #params > 0 then stmt:bind_param(unpack(params)) end
    entry = {stmt = stmt, params = params}
    by_table[table_no] = entry
  end
  for i, v in ipairs(values) do entry.params[i]:set(v) end
  entry.stmt:execute()
end

function mb.char_param(len) return {CHAR, len} end
mb.INT = {INT}

function mb.query(sql)
  if mb.explaining then return explain(sql) end
  mb.con:query(sql)
end

-- Thread lifecycle -----------------------------------------------------------------------

function thread_init()
  mb.drv = sysbench.sql.driver()
  mb.con = mb.drv:connect()
  prepared = {}
end

function thread_done()
  for _, by_table in pairs(prepared) do
    for _, entry in pairs(by_table) do entry.stmt:close() end
  end
  mb.con:disconnect()
end

-- An ignored error (deadlock, duplicate key) restarts the event; end its transaction
-- first so the retry does not run inside a half-done one.
function sysbench.hooks.before_restart_event(err)
  mb.con:query("ROLLBACK")
end

-- Every worker thread has its own Lua state, so per-step counters are reported per
-- thread (at thread_done) and summed by the harness.
function mb.report_metrics(values)
  local parts = {}
  for name, value in pairs(values) do
    parts[#parts + 1] = string.format('"%s":%.6f', name, value)
  end
  mb.emit("MBMETRIC {" .. table.concat(parts, ",") .. "}")
end

-- Reporting ------------------------------------------------------------------------------

local function stat_json(stat)
  return string.format(
    '{"interval":%.6f,"total":%.6f,"events":%d,"reads":%d,"writes":%d,"other":%d,' ..
    '"errors":%d,"reconnects":%d,"latency_pct_s":%.9f,"threads_running":%d}',
    stat.time_interval, stat.time_total, stat.events, stat.reads, stat.writes, stat.other,
    stat.errors, stat.reconnects, stat.latency_pct, stat.threads_running)
end

function sysbench.hooks.report_intermediate(stat)
  mb.emit("MBSTAT " .. stat_json(stat))
end

function sysbench.hooks.report_cumulative(stat)
  mb.emit("MBFINAL " .. stat_json(stat))
end

return mb
