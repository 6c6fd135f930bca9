-- unfollow.lua (unfollowScript in scripts.go), after common.lua
--
-- unfollowScript records that the reader no longer follows ARGV[1] as of
-- version ARGV[5] of their graph (the following hash kept for ARGV[2]
-- seconds more) and removes posts (ARGV[6..]) from their feed: the followee's posts at or above ARGV[3],
-- the lowest entry the caller saw ("-": none), read from PostgreSQL after
-- that. If the feed now holds a post below it (a rebuild finished in
-- between), the ids may not cover the feed: nothing is changed and it
-- returns -1, and the caller looks again. ARGV[4], the PostgreSQL write
-- position read after the unfollow was committed, becomes the feed's "as
-- of": a fan-out whose page of followers was read before it asks the
-- following hash before it pushes (see pushScript). A feed under rebuild is
-- dropped instead: the rebuild read PostgreSQL before the unfollow and
-- would put the posts back; the next read rebuilds it without them. So is a
-- feed without its following hash. A state that is stale (see
-- followField: a follow newer than this unfollow was applied already)
-- changes nothing and returns -2. Otherwise it returns how many posts it
-- removed.
local mk, hk, tk, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = getSet(mk, hk)
local ids = h and entries(h, tk)
if not ids or building(h) or redis.call('HEXISTS', fk, 'v') == 0 then
  drop(mk, hk, tk, fk)
  return 0
end
local v = tonumber(ARGV[5])
local state, ver, stale = followField(fk, ARGV[1], v)
if stale or (state == 1 and ver == v) then return -2 end
if #ids > 0 and (ARGV[3] == '-' or ids[1] < tonumber(ARGV[3])) then
  return -1
end
unmarkMerge(fk, ARGV[1])
if state ~= -1 or ver ~= v then
  redis.call('HSET', fk, ARGV[1], -(v + 1))
  redis.call('HINCRBY', fk, 'v', 1)
end
redis.call('EXPIRE', fk, ARGV[2])
local gone = {}
for _, id in ipairs(numbers(6)) do gone[id] = true end
local removed
ids, removed = without(ids, gone)
h.asOf = math.max(h.asOf, tonumber(ARGV[4]))
store(mk, hk, tk, h, ids, nil)
dropIfEmptyPrefix(mk, hk, tk, h, fk)
return removed
