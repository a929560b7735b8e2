-- update-index: k = k + 1 by primary key, so the secondary index k_N changes each time.
require("mb_common")
require("mb_writes")

function event()
  mb.update_index(mb.random_table())
end
