-- points-covered-pk: `range` random primary keys returning only the key, so the
-- clustered index answers without reading the rest of the row.
require("mb_common")
require("mb_keys")

mb.in_list_statement("points", "id", "id")

function event() mb.in_list_event("points") end
