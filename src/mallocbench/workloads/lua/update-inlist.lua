-- update-inlist: a new c for `range` random rows in one statement (autocommit).
require("mb_common")

mb.statement("update_inlist", function(n)
  return string.format("UPDATE sbtest%d SET c = ? WHERE id IN (%s)", n,
    mb.placeholders(mb.range()))
end, function()
  local types = mb.int_params(mb.range())
  table.insert(types, 1, mb.char_param(120))
  return types
end)

function event()
  local values = mb.random_ids(mb.range())
  table.insert(values, 1, mb.random_c())
  mb.execute("update_inlist", mb.random_table(), values)
end
