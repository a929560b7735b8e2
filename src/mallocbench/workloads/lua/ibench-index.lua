-- l.x: add the three secondary indexes, one ALTER TABLE per event, then stop. Indexes
-- left by an earlier run are dropped first (untimed) so the step always builds all three.
require("mb_common")
require("mb_ibench")

local built = 0

function init()
  ib.with_connection(function()
    ib.ensure(false)
    for _, index in ipairs(ib.INDEXES) do
      if ib.index_exists(index.name) then
        mb.con:query(string.format("ALTER TABLE %s DROP INDEX %s", ib.TABLE, index.name))
      end
    end
  end)
end

function event()
  if ib.tid() ~= 0 or built >= #ib.INDEXES then return true end
  built = built + 1
  ib.add_index(ib.INDEXES[built])
end
