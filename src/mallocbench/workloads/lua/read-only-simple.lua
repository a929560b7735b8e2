-- read-only-simple: of the OLTP read-only transaction, the plain SELECT c range query alone,
-- over `range` rows, one query per event and no explicit transaction.
require("mb_common")
require("mb_ranges")

function event()
  mb.range_query("simple", mb.random_table())
end
