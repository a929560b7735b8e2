-- update-zipf: update-nonindex with zipfian ids. sysbench 1.0 has no zipfian rand type
-- (1.1 added one, exponent 0.8 by default), so ids come from our own generator: Gray et
-- al.'s "Quickly generating billion-record synthetic databases" method (as in YCSB),
-- with id 1 the hottest and the same default exponent 0.8 (--zipf-exp to change it).
require("mb_common")
require("mb_writes")

sysbench.cmdline.options.zipf_exp = {"Zipf exponent of update-zipf's ids (0 < s < 1)", 0.8}

-- zeta(n, s) = sum_{i=1..n} i^-s. Summed exactly up to 10000, then by the Euler-Maclaurin
-- integral with its first correction, so a 100M-row table costs no more than 10000 rows.
local function zeta(n, s)
  local exact = math.min(n, 10000)
  local sum = 0
  for i = 1, exact do sum = sum + i ^ -s end
  if n > exact then
    sum = sum + (n ^ (1 - s) - exact ^ (1 - s)) / (1 - s) + (n ^ -s - exact ^ -s) / 2
  end
  return sum
end

local zipf

local function make_zipf(n, s)
  local zetan = zeta(n, s)
  local eta = (1 - (2 / n) ^ (1 - s)) / (1 - zeta(2, s) / zetan)
  return {n = n, s = s, zetan = zetan, eta = eta, alpha = 1 / (1 - s), half = 1 + 0.5 ^ s}
end

function mb.zipf_id()
  if zipf == nil then
    zipf = make_zipf(math.max(2, mb.table_size()), tonumber(sysbench.opt.zipf_exp))
  end
  local u = sysbench.rand.uniform_double()
  local uz = u * zipf.zetan
  if uz < 1 then return 1 end
  if uz < zipf.half then return 2 end
  local id = 1 + math.floor(zipf.n * (zipf.eta * u - zipf.eta + 1) ^ zipf.alpha)
  return math.min(id, zipf.n)
end

function event()
  mb.execute("update_nonindex", mb.random_table(), {mb.random_c(), mb.zipf_id()})
end
