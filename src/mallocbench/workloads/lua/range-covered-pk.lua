-- range-covered-pk: a primary-key range of `range` rows, returning only the key.
require("mb_common")
require("mb_keys")

mb.between_statement("range", "id", "id")

function event() mb.between_event("range") end
