-- update-nonindex: a new c by primary key; no index changes.
require("mb_common")
require("mb_writes")

function event()
  mb.update_nonindex(mb.random_table())
end
