-- qr100 / qr500 / qr1000: each event reads 10 rows by a range on one of the three
-- secondary indexes, picked at random, selecting only that index's columns (covering),
-- while background writers insert and delete at the target rate.
require("mb_common")
require("mb_ibench_query")

for i, index in ipairs(ib.INDEXES) do
  local columns = table.concat(index.columns, ", ")
  mb.statement("ib_range" .. i, function()
    return string.format("SELECT %s FROM %s FORCE INDEX (%s) WHERE %s >= ? ORDER BY %s LIMIT 10",
      columns, ib.TABLE, index.name, index.columns[1], columns)
  end, mb.int_params(1))
end

local FIRST_COLUMN_MAX = {productid = 9999, cashregisterid = 999, price = ib.MAX_PRICE}

function event()
  local i = sysbench.rand.uniform(1, #ib.INDEXES)
  local first = ib.INDEXES[i].columns[1]
  mb.execute("ib_range" .. i, 1, {sysbench.rand.uniform(0, FIRST_COLUMN_MAX[first])})
  ib.count_query()
end
