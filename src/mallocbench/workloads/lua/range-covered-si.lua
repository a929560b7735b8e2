-- range-covered-si: a range of k values returning only k: index-only on k_N.
require("mb_common")
require("mb_keys")

mb.between_statement("range", "k", "k")

function event() mb.between_event("range") end
