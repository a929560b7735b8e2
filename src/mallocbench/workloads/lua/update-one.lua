-- update-one: update-nonindex on a table of size one, i.e. every event updates the same
-- row (id 1 of a random table): a hot row, so the cost is lock and latch waits.
require("mb_common")
require("mb_writes")

function event()
  mb.execute("update_nonindex", mb.random_table(), {mb.random_c(), 1})
end
