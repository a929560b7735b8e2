-- The writes of the OLTP write transactions, shared by the update/delete/write steps.
mb.statement("update_index", function(n)
  return string.format("UPDATE sbtest%d SET k = k + 1 WHERE id = ?", n)
end, mb.int_params(1))

mb.statement("update_nonindex", function(n)
  return string.format("UPDATE sbtest%d SET c = ? WHERE id = ?", n)
end, {mb.char_param(120), mb.INT})

mb.statement("delete", function(n)
  return string.format("DELETE FROM sbtest%d WHERE id = ?", n)
end, mb.int_params(1))

mb.statement("reinsert", function(n)
  return string.format("INSERT INTO sbtest%d (id, k, c, pad) VALUES (?, ?, ?, ?)", n)
end, {mb.INT, mb.INT, mb.char_param(120), mb.char_param(60)})

function mb.update_index(n) mb.execute("update_index", n, {mb.random_id()}) end

function mb.update_nonindex(n) mb.execute("update_nonindex", n, {mb.random_c(), mb.random_id()}) end

-- Delete a random row and put it back, so the table keeps its size across the step.
function mb.delete_reinsert(n)
  local id = mb.random_id()
  mb.execute("delete", n, {id})
  mb.execute("reinsert", n, {id, mb.random_id(), mb.random_c(), mb.random_pad()})
end

function mb.write_transaction_body(n)
  mb.update_index(n)
  mb.update_nonindex(n)
  mb.delete_reinsert(n)
end
