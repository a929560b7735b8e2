-- points-notcovered-si: `range` random k values returning c, so every match in k_N is
-- followed by a primary-key lookup of its row.
require("mb_common")
require("mb_keys")

mb.in_list_statement("points", "k, c", "k")

function event() mb.in_list_event("points") end
