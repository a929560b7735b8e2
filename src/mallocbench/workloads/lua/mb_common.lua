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
  turns = {"Turn owners, one digit a turn (\"0110\"): clients that take turns", ""},
  turn_mine = {"This client's digit in --turns", "0"},
  turn_start = {"Wall-clock second (Unix time) the first turn begins", 0},
  turn_width = {"Seconds per turn", 1},
}

local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } mb_timespec;
int clock_gettime(int clk_id, mb_timespec *tp);
int usleep(unsigned int usec);
uint64_t sb_counter_val(int thread_id, int counter);
]]

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

-- Turns ----------------------------------------------------------------------------------
-- Several setups' clients, each its own sysbench process on its own server, share the
-- machine by turns: with --turns, a worker runs events only in the turns its process
-- owns and sleeps through the others, on the wall clock every process reads alike. The
-- clients stay connected, so a turn can be a second long and the machine's fast drift
-- reaches neighbouring turns of different setups alike. The wait is outside
-- sb_event_start/stop, so latencies are the queries' own. At the end of each own turn a
-- worker reports what it did in it, from sysbench's own per-thread counters.

local CLOCK_REALTIME, CLOCK_MONOTONIC = 0, 1
local ts = ffi.new("mb_timespec")
local CNT_OTHER, CNT_READ, CNT_WRITE, CNT_EVENT, CNT_ERROR = 0, 1, 2, 3, 4

local function clock(id)
  ffi.C.clock_gettime(id, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end
function mb.now() return clock(CLOCK_MONOTONIC) end
function mb.wall() return clock(CLOCK_REALTIME) end
function mb.sleep(seconds)
  if seconds > 0 then ffi.C.usleep(math.floor(seconds * 1e6)) end
end

local function counters(thread_id)
  local c = function(kind) return tonumber(ffi.C.sb_counter_val(thread_id, kind)) end
  return c(CNT_OTHER) + c(CNT_READ) + c(CNT_WRITE), c(CNT_EVENT), c(CNT_ERROR)
end

-- One event as sysbench's own loop runs it; true when event() asked to stop.
local function one_event(thread_id)
  ffi.C.sb_event_start(thread_id)
  local success, ret
  repeat
    success, ret = pcall(event, thread_id)
    if not success then
      if type(ret) == "table" and ret.errcode == sysbench.error.RESTART_EVENT then
        if sysbench.hooks.before_restart_event then
          sysbench.hooks.before_restart_event(ret)
        end
      else
        error(ret, 2)
      end
    end
  until success
  if ret then return true end
  ffi.C.sb_event_stop(thread_id)
  return false
end

local function take_turns(thread_id)
  local order, mine = sysbench.opt.turns, tostring(sysbench.opt.turn_mine)
  local start, width = sysbench.opt.turn_start, sysbench.opt.turn_width
  for k = 1, #order do
    if order:sub(k, k) == mine then
      local from, to = start + (k - 1) * width, start + k * width
      -- A sleep a signal cut short must not start the turn early.
      while mb.wall() < from do mb.sleep(from - mb.wall()) end
      local queries, events, errors = counters(thread_id)
      local began = mb.wall()
      local stop = false
      while not stop and mb.wall() < to and ffi.C.sb_more_events(thread_id) do
        stop = one_event(thread_id)
      end
      local ended = mb.wall()
      local q, e, err = counters(thread_id)
      mb.emit(string.format(
        'MBTURN {"turn":%d,"thread":%d,"from":%.6f,"to":%.6f,"began":%.6f,"ended":%.6f,' ..
        '"queries":%d,"events":%d,"errors":%d}',
        k - 1, thread_id, from, to, began, ended, q - queries, e - events, err - errors))
      if stop or not ffi.C.sb_more_events(thread_id) then return end
    end
  end
end

function thread_run(thread_id)
  if sysbench.opt.turns ~= "" then return take_turns(thread_id) end
  while ffi.C.sb_more_events(thread_id) do
    if one_event(thread_id) then break end
  end
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
