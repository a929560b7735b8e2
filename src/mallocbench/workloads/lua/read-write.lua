-- read-write: the OLTP read-write transaction: the read-only transaction's 10 point
-- selects and four ranges of width `range`, then an index update, a non-index update and
-- a delete + re-insert, inside BEGIN/COMMIT.
require("mb_common")
require("mb_ranges")
require("mb_writes")

mb.statement("point", function(n)
  return string.format("SELECT c FROM sbtest%d WHERE id = ?", n)
end, mb.int_params(1))

function event()
  local n = mb.random_table()
  mb.query("BEGIN")
  for _ = 1, 10 do mb.execute("point", n, {mb.random_id()}) end
  for _, kind in ipairs(mb.RANGE_KINDS) do mb.range_query(kind, n) end
  mb.write_transaction_body(n)
  mb.query("COMMIT")
end
