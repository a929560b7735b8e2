-- read-only-distinct: of the OLTP read-only transaction, the DISTINCT c ... ORDER BY c range query alone (a temporary table and a sort),
-- over `range` rows, one query per event and no explicit transaction.
require("mb_common")
require("mb_ranges")

function event()
  mb.range_query("distinct", mb.random_table())
end
