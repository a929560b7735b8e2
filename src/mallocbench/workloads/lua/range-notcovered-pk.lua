-- range-notcovered-pk: a primary-key range of `range` rows returning c.
require("mb_common")
require("mb_keys")

mb.between_statement("range", "id, c", "id")

function event() mb.between_event("range") end
