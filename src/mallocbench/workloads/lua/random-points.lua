-- random-points: an IN-list of `range` random primary keys, returning c (base row read).
require("mb_common")

mb.statement("points", function(n)
  return string.format("SELECT c FROM sbtest%d WHERE id IN (%s)", n, mb.placeholders(mb.range()))
end, function() return mb.int_params(mb.range()) end)

function event()
  local ids = {}
  for i = 1, mb.range() do ids[i] = mb.random_id() end
  mb.execute("points", mb.random_table(), ids)
end
