-- finish_rebuild.lua (finishRebuildScript in scripts.go), after common.lua
--
-- finishRebuildScript completes a rebuild of a set (KEYS[1..3], meta, head
-- and tail) if its token (ARGV[4]) is still in the meta — nobody dropped the
-- set meanwhile, as follows and unfollows do, and no later rebuild took
-- over: it adds the posts (the last argument: ids packed as the set stores
-- them, ascending) to those pushed meanwhile, marks the set complete — and
-- whole when ARGV[3] is 1: the posts are the whole history —, trims it to
-- ARGV[1], sets its "as of" to ARGV[7] (the PostgreSQL write position read
-- after the rebuild read PostgreSQL) and lets it expire after ARGV[2]
-- seconds without reads. For a feed, KEYS[4] is the reader's following
-- hash: the posts pushed meanwhile whose author it recorded ("p<id>") go
-- unless the reader follows the author, and it is written anew with version
-- ARGV[6] (random, so that no version of a hash is ever seen twice), the
-- version of the reader's graph the followees were read at, ARGV[8] (as "g"
-- and as each followee's), and the ARGV[5] followee ids that follow (the
-- reader among them: their own posts are in their feed), and the users the
-- reader hides, ARGV[#ARGV - 1] (field "x": see hide.lua). It returns 1 when
-- the set is complete now, 0 when the rebuild gave up.
local mk, hk, tk, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = getSet(mk, hk)
if not h or h.token ~= ARGV[4] then return 0 end
local ids = entries(h, tk)
if not ids then
  drop(mk, hk, tk, nil)
  return 0
end
local nFollowees = tonumber(ARGV[5])
if fk then
  if redis.call('HEXISTS', fk, 'v') == 0 then
    local followed = {}
    for i = 9, 8 + nFollowees do followed[ARGV[i]] = true end
    local gone = {}
    local fields = redis.call('HGETALL', fk)
    for j = 1, #fields, 2 do
      if string.sub(fields[j], 1, 1) == 'p' and not followed[fields[j + 1]] then
        gone[tonumber(string.sub(fields[j], 2))] = true
      end
    end
    ids = without(ids, gone)
  end
  redis.call('DEL', fk)
  redis.call('HSET', fk, 'v', ARGV[6], 'g', ARGV[8], 'x', ARGV[#ARGV - 1])
  local followedAt = tonumber(ARGV[8]) + 1 -- see followField
  for i = 9, 8 + nFollowees do
    redis.call('HSET', fk, ARGV[i], followedAt)
  end
  redis.call('EXPIRE', fk, ARGV[2])
end
ids = union(ids, unpackAll(ARGV[#ARGV]))
h.token = NOTOKEN
h.flags = COMPLETE
if ARGV[3] == '1' then h.flags = COMPLETE + WHOLE end
h.asOf = tonumber(ARGV[7])
redis.call('EXPIRE', mk, ARGV[2])
store(mk, hk, tk, h, ids, tonumber(ARGV[1]))
expireWith(mk, hk)
return 1
