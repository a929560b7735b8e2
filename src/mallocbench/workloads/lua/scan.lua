-- scan: a full table scan that returns nothing, so the cost is reading every row.
require("mb_common")

function event()
  mb.query(string.format("SELECT * FROM sbtest%d WHERE LENGTH(c) < 0", mb.random_table()))
end
