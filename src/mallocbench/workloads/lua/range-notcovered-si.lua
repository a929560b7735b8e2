-- range-notcovered-si: a range of k values returning c: a row lookup per match in k_N.
require("mb_common")
require("mb_keys")

mb.between_statement("range", "k, c", "k")

function event() mb.between_event("range") end
