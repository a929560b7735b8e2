-- random-points: an IN-list of `range` random primary keys, returning c (base row read).
require("mb_common")
require("mb_keys")

mb.in_list_statement("points", "c", "id")

function event() mb.in_list_event("points") end
