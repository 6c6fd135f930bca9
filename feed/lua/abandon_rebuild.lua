-- abandon_rebuild.lua (abandonRebuildScript in scripts.go), after common.lua
--
-- abandonRebuildScript removes a set (KEYS[1..3], meta, head and tail) that
-- a rebuild which failed began, if its token (ARGV[1]) is still in the
-- meta: left, it would take every push for as long as it lives (no set
-- under rebuild is trimmed). For a feed, KEYS[4] is the reader's following
-- hash, removed with it unless it is complete (what a rebuild records in it
-- while it reads belongs to that rebuild). A set that another rebuild took
-- over, or that this one completed after all, stays. It returns 1 when it
-- removed the set.
local mk, hk, tk, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local m = redis.call('GET', mk)
if type(m) ~= 'string' or #m ~= HEADER or string.byte(m, 1) ~= MAGIC or string.sub(m, 3, 10) ~= ARGV[1] then
  return 0
end
redis.call('DEL', mk, hk, tk)
if fk and redis.call('HEXISTS', fk, 'v') == 0 then redis.call('DEL', fk) end
return 1
