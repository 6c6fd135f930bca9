-- follow.lua (followScript in scripts.go), after common.lua
--
-- followScript records that the reader follows ARGV[1] in their following
-- hash (KEYS[4]), kept for ARGV[2] seconds more, if their feed (KEYS[1..3],
-- meta, head and tail) is complete: from then on pushes of the followee's
-- posts land in the feed. A feed under rebuild, or without its following
-- hash, is dropped instead: the next read rebuilds it with the new follow.
-- It returns 1 when the feed is there to merge into, 0 when there is none
-- (any more).
local mk, hk, tk, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = getSet(mk, hk)
if not h or building(h) or redis.call('HEXISTS', fk, 'v') == 0 then
  drop(mk, hk, tk, fk)
  return 0
end
redis.call('HSET', fk, ARGV[1], 1)
redis.call('HINCRBY', fk, 'v', 1)
redis.call('EXPIRE', fk, ARGV[2])
return 1
