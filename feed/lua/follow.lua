-- follow.lua (followScript in scripts.go), after common.lua
--
-- followScript records that the reader follows ARGV[1] as of version
-- ARGV[3] of their graph in their following hash (KEYS[4]), kept for
-- ARGV[2] seconds more, if their feed (KEYS[1..3], meta, head and tail) is
-- complete: from then on pushes of the followee's posts land in the feed,
-- and the merge that follows (mergeScript) is marked pending (markMerge).
-- A state that is stale (see followField) changes nothing: an unfollow
-- newer than this follow was applied already. A feed under rebuild, or
-- without its following hash, is dropped instead: the next read rebuilds
-- it with the new follow. It returns 1 when the feed is there to merge
-- into (also when this same state was applied before, whose merge may have
-- failed), 0 when there is none (any more), -2 when the state is stale.
local mk, hk, tk, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = getSet(mk, hk)
if not h or building(h) or redis.call('HEXISTS', fk, 'v') == 0 then
  drop(mk, hk, tk, fk)
  return 0
end
local v = tonumber(ARGV[3])
local state, ver, stale = followField(fk, ARGV[1], v)
if stale then return -2 end
if state ~= 1 or ver ~= v then
  redis.call('HSET', fk, ARGV[1], v + 1)
  redis.call('HINCRBY', fk, 'v', 1)
end
markMerge(fk, ARGV[1], v)
redis.call('EXPIRE', fk, ARGV[2])
return 1
