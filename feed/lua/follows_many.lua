-- follows_many.lua (followsManyScript in scripts.go), after common.lua
--
-- followsManyScript ends a feed's rebuild that found its reader following more
-- accounts than fanout.following_threshold: such a reader keeps no feed in
-- Redis (fan-out then writes nothing for them) and is read from PostgreSQL.
-- KEYS: the feed's meta, head and tail, the reader's following hash and the
-- mark that says the reader follows many; ARGV[1] is the rebuild's token,
-- ARGV[2] the mark's life in seconds. If the token is still in the meta
-- (no follow, unfollow or later rebuild came between), the set and the hash
-- go and the mark is set; else nothing changes. It returns 1 when it set
-- the mark.
local mk, hk, tk, fk, pk = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local m = redis.call('GET', mk)
if type(m) ~= 'string' or #m ~= HEADER or string.byte(m, 1) ~= MAGIC or string.sub(m, 3, 10) ~= ARGV[1] then
  return 0
end
redis.call('DEL', mk, hk, tk, fk)
redis.call('SET', pk, '1', 'EX', ARGV[2])
return 1
