-- The reads of the OLTP read transactions (ten point selects and four range queries),
-- shared by read-only, read-write and the read-only-<kind> steps that run a single one.
mb.RANGE_KINDS = {"simple", "sum", "order", "distinct"}

local RANGE_SQL = {
  simple = "SELECT c FROM sbtest%d WHERE id BETWEEN ? AND ?",
  sum = "SELECT SUM(k) FROM sbtest%d WHERE id BETWEEN ? AND ?",
  order = "SELECT c FROM sbtest%d WHERE id BETWEEN ? AND ? ORDER BY c",
  distinct = "SELECT DISTINCT c FROM sbtest%d WHERE id BETWEEN ? AND ? ORDER BY c",
}

for kind, sql in pairs(RANGE_SQL) do
  mb.statement("range_" .. kind, function(n) return string.format(sql, n) end, mb.int_params(2))
end

-- Statements are prepared on first use, so steps that never run a point select pay nothing.
mb.statement("point_select", function(n)
  return string.format("SELECT c FROM sbtest%d WHERE id = ?", n)
end, mb.int_params(1))

function mb.range_query(kind, n)
  local first = mb.random_id()
  mb.execute("range_" .. kind, n, {first, first + mb.range() - 1})
end

-- The read part of oltp_read_only / oltp_read_write; the caller owns BEGIN/COMMIT so
-- read-write can put its writes in the same transaction.
function mb.read_transaction_body(n)
  for _ = 1, 10 do mb.execute("point_select", n, {mb.random_id()}) end
  for _, kind in ipairs(mb.RANGE_KINDS) do mb.range_query(kind, n) end
end
