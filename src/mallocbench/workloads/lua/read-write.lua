-- read-write: the OLTP read-write transaction: the read-only transaction's 10 point
-- selects and four ranges of width `range`, then an index update, a non-index update and
-- a delete + re-insert, inside BEGIN/COMMIT.
require("mb_common")
require("mb_ranges")
require("mb_writes")

function event()
  local n = mb.random_table()
  mb.query("BEGIN")
  mb.read_transaction_body(n)
  mb.write_transaction_body(n)
  mb.query("COMMIT")
end
