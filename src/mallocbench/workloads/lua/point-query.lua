-- point-query: one primary-key lookup per event.
require("mb_common")

mb.statement("point", function(n)
  return string.format("SELECT c FROM sbtest%d WHERE id = ?", n)
end, mb.int_params(1))

function event()
  mb.execute("point", mb.random_table(), {mb.random_id()})
end
