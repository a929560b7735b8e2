-- delete: one random row by primary key per event. Rows are not put back, which is why
-- this step runs after every read step.
require("mb_common")
require("mb_writes")

function event()
  mb.execute("delete", mb.random_table(), {mb.random_id()})
end
