-- The four range queries of the OLTP read transactions, shared by read-only, read-write
-- and the read-only-<kind> steps that run a single one of them.
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

function mb.range_query(kind, n)
  local first = mb.random_id()
  mb.execute("range_" .. kind, n, {first, first + mb.range() - 1})
end
