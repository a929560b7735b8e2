-- IN-lists and BETWEEN ranges over the primary key (id) or the secondary index k_N (k),
-- shared by the points-* and range-* steps. The selected columns decide whether a step
-- is covered: an index holds its own key and, in InnoDB and MyRocks, the primary key,
-- so `id` or `k` alone is answered from the index and anything with `c` reads the row.

-- Declares statement `name` as SELECT <columns> ... WHERE <key> IN (<range> placeholders).
function mb.in_list_statement(name, columns, key)
  mb.statement(name, function(n)
    return string.format("SELECT %s FROM sbtest%d WHERE %s IN (%s)", columns, n, key,
      mb.placeholders(mb.range()))
  end, function() return mb.int_params(mb.range()) end)
end

-- Declares statement `name` as SELECT <columns> ... WHERE <key> BETWEEN ? AND ?.
function mb.between_statement(name, columns, key)
  mb.statement(name, function(n)
    return string.format("SELECT %s FROM sbtest%d WHERE %s BETWEEN ? AND ?", columns, n, key)
  end, mb.int_params(2))
end

-- One event of a points-* step: `range` random keys (ids and k share 1..table_size).
function mb.in_list_event(name)
  mb.execute(name, mb.random_table(), mb.random_ids(mb.range()))
end

-- One event of a range-* step: the published shape is BETWEEN ? AND ?+N.
function mb.between_event(name)
  local first = mb.random_id()
  mb.execute(name, mb.random_table(), {first, first + mb.range()})
end
