-- read-only: the OLTP read-only transaction: 10 point selects and one each of the
-- simple, SUM, ORDER BY and DISTINCT ranges of width `range`, inside BEGIN/COMMIT.
require("mb_common")
require("mb_ranges")

function event()
  local n = mb.random_table()
  mb.query("BEGIN")
  mb.read_transaction_body(n)
  mb.query("COMMIT")
end
