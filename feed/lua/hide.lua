-- hide.lua (hideScript in scripts.go), after common.lua
--
-- hideScript records in the reader's following hash (KEYS[4]) whether
-- their feed (KEYS[1..3], meta, head and tail) hides the entries of user
-- ARGV[1] — ARGV[3] is 1 when it does (a mute, or a block either way) —,
-- as of version ARGV[2] of the reader's graph. The hash keeps, per user it
-- ever hid, a field "h<id>" signed as a followee's is (see followField), and
-- the list of the users hidden now, field "x" (decimal ids, commas between),
-- which reads take with the hash's version (which this bumps) and filter
-- by. The entries stay
-- in the feed, so that an unmute shows them again at once. A state that is
-- stale changes nothing: a newer one was applied, or the hash was rebuilt
-- at or after it. A feed under rebuild, or whose hash has no "x" (missing,
-- or written by an older version), is dropped instead, with the hash: the
-- next read rebuilds both with the change. It returns 1 when applied, 0
-- when the feed was dropped (or not there), -2 when the state is stale.
local mk, hk, tk, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = getSet(mk, hk)
if not h or building(h) or redis.call('HEXISTS', fk, 'x') == 0 then
  drop(mk, hk, tk, fk)
  return 0
end
local other, v, hidden = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local f = redis.call('HMGET', fk, 'h' .. other, 'g', 'x')
local cur, base = tonumber(f[1]) or 0, tonumber(f[2]) or 0
local ver = 0
if cur > 0 then ver = cur - 1 elseif cur < 0 then ver = -cur - 1 end
if v <= base or ver > v then return -2 end
if hidden then
  redis.call('HSET', fk, 'h' .. other, v + 1)
else
  redis.call('HSET', fk, 'h' .. other, -(v + 1))
end
local list = {}
for id in string.gmatch(f[3], '%d+') do
  if id ~= other then list[#list + 1] = id end
end
if hidden then list[#list + 1] = other end
redis.call('HSET', fk, 'x', table.concat(list, ','))
redis.call('HINCRBY', fk, 'v', 1) -- a read that asked PostgreSQL meanwhile sees the change
return 1
