-- read-only-count: count(c) over a primary-key range of `range` rows; c is not null, so
-- the server still reads every row of the range.
require("mb_common")

mb.statement("count", function(n)
  return string.format("SELECT count(c) FROM sbtest%d WHERE id BETWEEN ? AND ?", n)
end, mb.int_params(2))

function event()
  local first = mb.random_id()
  mb.execute("count", mb.random_table(), {first, first + mb.range() - 1})
end
