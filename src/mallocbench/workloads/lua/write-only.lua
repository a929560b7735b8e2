-- write-only: the OLTP write transaction: an index update, a non-index update and a
-- delete + re-insert of one row, inside BEGIN/COMMIT.
require("mb_common")
require("mb_writes")

function event()
  local n = mb.random_table()
  mb.query("BEGIN")
  mb.write_transaction_body(n)
  mb.query("COMMIT")
end
