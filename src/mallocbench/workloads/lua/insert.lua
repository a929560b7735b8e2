-- insert: one row per event with an auto-increment id and random k, c, pad.
require("mb_common")

mb.statement("insert", function(n)
  return string.format("INSERT INTO sbtest%d (k, c, pad) VALUES (?, ?, ?)", n)
end, {mb.INT, mb.char_param(120), mb.char_param(60)})

function event()
  mb.execute("insert", mb.random_table(), {mb.random_id(), mb.random_c(), mb.random_pad()})
end
