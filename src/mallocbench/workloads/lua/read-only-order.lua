-- read-only-order: a range of `range` rows sorted by c (a filesort: the per-query sort
-- buffer is the allocation that the malloc+memset -> calloc fold made expensive).
require("mb_common")
require("mb_ranges")

function event()
  mb.range_query("order", mb.random_table())
end
