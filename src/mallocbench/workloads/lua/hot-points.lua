-- hot-points: the same `range` adjacent ids from the middle of the table every time, so
-- all rows stay cached and the cost is the server's per-query work, not the data.
require("mb_common")
require("mb_keys")

mb.in_list_statement("hot", "c", "id")

local hot_ids

function event()
  if hot_ids == nil then
    local first = math.max(1, math.floor((mb.table_size() - mb.range()) / 2) + 1)
    hot_ids = {}
    for i = 1, mb.range() do hot_ids[i] = first + i - 1 end
  end
  mb.execute("hot", mb.random_table(), hot_ids)
end
