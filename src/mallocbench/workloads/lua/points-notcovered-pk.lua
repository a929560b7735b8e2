-- points-notcovered-pk: `range` random primary keys returning c from the row.
require("mb_common")
require("mb_keys")

mb.in_list_statement("points", "id, c", "id")

function event() mb.in_list_event("points") end
