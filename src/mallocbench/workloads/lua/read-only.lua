-- read-only: the OLTP read-only transaction: 10 point selects and one each of the
-- simple, SUM, ORDER BY and DISTINCT ranges of width `range`, inside BEGIN/COMMIT.
require("mb_common")
require("mb_ranges")

mb.statement("point", function(n)
  return string.format("SELECT c FROM sbtest%d WHERE id = ?", n)
end, mb.int_params(1))

function event()
  local n = mb.random_table()
  mb.query("BEGIN")
  for _ = 1, 10 do mb.execute("point", n, {mb.random_id()}) end
  for _, kind in ipairs(mb.RANGE_KINDS) do mb.range_query(kind, n) end
  mb.query("COMMIT")
end
