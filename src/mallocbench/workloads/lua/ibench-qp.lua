-- qp100 / qp500 / qp1000: each event reads 10 rows by primary key (an IN-list of ids
-- drawn from the live range, which moves as the writers insert and delete), while
-- background writers insert and delete at the target rate.
require("mb_common")
require("mb_ibench_query")

mb.statement("ib_points", function()
  return string.format("SELECT transactionid, dateandtime, cashregisterid, customerid, " ..
    "productid, price, data FROM %s WHERE transactionid IN (%s)", ib.TABLE, mb.placeholders(10))
end, mb.int_params(10))

local low, high, until_refresh = 1, 1, 0

function event()
  -- The live id range drifts up by the write rate; re-reading it every 100 queries keeps
  -- nearly every id a hit at a negligible cost (MIN/MAX are index dives).
  if until_refresh <= 0 then
    local lo, hi = mb.con:query_row(string.format(
      "SELECT COALESCE(MIN(transactionid), 1), COALESCE(MAX(transactionid), 1) FROM %s",
      ib.TABLE))
    low, high, until_refresh = tonumber(lo), tonumber(hi), 100
  end
  until_refresh = until_refresh - 1
  local ids = {}
  for i = 1, 10 do ids[i] = sysbench.rand.uniform(low, high) end
  mb.execute("ib_points", 1, ids)
  ib.count_query()
end
