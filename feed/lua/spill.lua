-- spill.lua (spillScript in scripts.go), after common.lua
--
-- spillScript spills the heads among KEYS (every set's meta, then every
-- head, then every tail) that hold ARGV[2] entries or more (see spill),
-- trimming complete sets to ARGV[1]: the second step of a push whose
-- first (appendScript) filled them.
--
-- KEYS here means the call's keys: on a cluster primary they come after
-- the arguments (see callKeys).
local maxlen, spillAt = tonumber(ARGV[1]), tonumber(ARGV[2])
local keep = math.max(math.floor(spillAt / 4), 1)
local keys = callKeys(2)
local n = setsOf(keys, 3)
for j = 1, n do
  local mk, hk, tk = keys[j], keys[n + j], keys[2 * n + j]
  if redis.call('STRLEN', hk) >= 1 + 8 * spillAt then spill(mk, hk, tk, maxlen, keep) end
end
return 0
