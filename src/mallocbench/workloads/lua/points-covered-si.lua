-- points-covered-si: `range` random k values returning only k: index-only on k_N.
require("mb_common")
require("mb_keys")

mb.in_list_statement("points", "k", "k")

function event() mb.in_list_event("points") end
