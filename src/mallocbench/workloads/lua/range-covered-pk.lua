-- range-covered-pk: a primary-key range of `range` rows, returning only the key.
require("mb_common")

mb.statement("range", function(n)
  return string.format("SELECT id FROM sbtest%d WHERE id BETWEEN ? AND ?", n)
end, mb.int_params(2))

function event()
  local first = mb.random_id()
  mb.execute("range", mb.random_table(), {first, first + mb.range()})
end
