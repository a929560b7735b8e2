-- read-only-sum: of the OLTP read-only transaction, the SELECT SUM(k) range query alone,
-- over `range` rows, one query per event and no explicit transaction.
require("mb_common")
require("mb_ranges")

function event()
  mb.range_query("sum", mb.random_table())
end
