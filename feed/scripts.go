package feed

import "github.com/redis/go-redis/v9"

// The scripts keep every feed and timeline a complete newest prefix of the
// truth: the set holds every post it should down to its lowest entry, and
// reads go on in PostgreSQL below that. The marker "0" says how far: score
// 0, down to the lowest entry; score -0.5 (wholeMarkerScore), the whole
// history, so reads need not go on in PostgreSQL at all. Trimming and
// floors turn a whole set into a prefix.

// pushScript adds one post (ARGV[1]) to one set if the set exists, then trims
// it to ARGV[2] entries, keeping the marker at rank 0. An id older than every
// post of a set that is only a prefix is left out: it would leave a gap
// above it (reads find it in PostgreSQL). It returns 1 when it added the
// post, 0 when it did not, -1 when there is no set.
var pushScript = redis.NewScript(`
local n = redis.call('ZCARD', KEYS[1])
if n == 0 then return -1 end
local added = redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1])
if n > tonumber(ARGV[2]) then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 1, -(tonumber(ARGV[2]) + 1))
  redis.call('ZADD', KEYS[1], 'XX', 0, '0')
elseif added == 1 and n > 1 and redis.call('ZRANK', KEYS[1], ARGV[1]) == 1
    and redis.call('ZSCORE', KEYS[1], '0') == '0' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  added = 0
end
return added
`)

// pushManyScript is pushScript for many feeds (KEYS) in one call: the cost of
// running a script is paid once per page of followers instead of once per
// follower, which brings a fan-out close to plain pipelined ZADD. Scripts may
// only touch keys of one slot in a Redis Cluster, so there pushScript is
// pipelined instead. It returns how many feeds gained the post.
var pushManyScript = redis.NewScript(`
local maxlen = tonumber(ARGV[2])
local added = 0
for i = 1, #KEYS do
  local k = KEYS[i]
  local n = redis.call('ZCARD', k) -- 0: no feed (a feed holds its marker)
  if n > 0 then
    local a = redis.call('ZADD', k, ARGV[1], ARGV[1])
    if n > maxlen then
      redis.call('ZREMRANGEBYRANK', k, 1, -(maxlen + 1))
      redis.call('ZADD', k, 'XX', 0, '0')
    elseif a == 1 and n > 1 and redis.call('ZRANK', k, ARGV[1]) == 1
        and redis.call('ZSCORE', k, '0') == '0' then
      redis.call('ZREM', k, ARGV[1])
      a = 0
    end
    added = added + a
  end
end
return added
`)

// mergeScript adds several posts (ARGV[3..]) of a newly followed author to
// one feed if it exists, then trims it to ARGV[1] entries. When ARGV[2] is not
// 0 the merged posts may not be all the author's posts down to the feed's
// lowest entry, so entries older than ARGV[2] are dropped first. Posts older
// than the lowest entry of a prefix are left out. A feed under rebuild, or a
// prefix with no posts left, is dropped instead: the next read rebuilds it
// with the new follow. It returns how many it added, or -1 when there is no
// feed (any more).
var mergeScript = redis.NewScript(`
local k = KEYS[1]
if redis.call('EXISTS', k) == 0 then return -1 end
if redis.call('ZSCORE', k, '-1') then
  redis.call('DEL', k)
  return -1
end
local whole = redis.call('ZSCORE', k, '0') ~= '0'
if ARGV[2] ~= '0' then
  redis.call('ZREMRANGEBYSCORE', k, 1, '(' .. ARGV[2])
  redis.call('ZADD', k, 'XX', 0, '0')
  whole = false
end
local lowest = nil
if not whole then
  local low = redis.call('ZRANGE', k, 1, 1, 'WITHSCORES')
  if #low == 0 and ARGV[2] == '0' then
    redis.call('DEL', k)
    return -1
  end
  if #low > 0 then lowest = tonumber(low[2]) end
end
local added = 0
for i = 3, #ARGV do
  if lowest == nil or tonumber(ARGV[i]) >= lowest then
    added = added + redis.call('ZADD', k, ARGV[i], ARGV[i])
  end
end
if redis.call('ZCARD', k) > tonumber(ARGV[1]) + 1 then
  redis.call('ZREMRANGEBYRANK', k, 1, -(tonumber(ARGV[1]) + 1))
  redis.call('ZADD', k, 'XX', 0, '0')
end
return added
`)

// unfollowScript removes posts (ARGV) from one feed. A feed under rebuild is
// dropped instead: the rebuild read PostgreSQL before the unfollow and would
// put the posts back; the next read rebuilds it without them.
var unfollowScript = redis.NewScript(`
if redis.call('ZSCORE', KEYS[1], '-1') then
  redis.call('DEL', KEYS[1])
  return 0
end
if #ARGV == 0 then return 0 end
return redis.call('ZREM', KEYS[1], unpack(ARGV))
`)

// finishRebuildScript completes a rebuild: if the placeholder is still there
// (nobody dropped the set meanwhile, as an unfollow does), it adds the posts
// (ARGV[4..]), swaps the placeholder for the complete marker — with score
// ARGV[3]: -0.5 when the posts are the whole history — trims to ARGV[1] and
// lets the set expire after ARGV[2] seconds without reads. It returns 1 when
// the set is now complete, 0 when it gave up.
var finishRebuildScript = redis.NewScript(`
if not redis.call('ZSCORE', KEYS[1], '-1') then return 0 end
for i = 4, #ARGV do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i])
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[3], '0')
redis.call('ZREM', KEYS[1], '-1')
if redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[1]) + 1 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 1, -(tonumber(ARGV[1]) + 1))
  redis.call('ZADD', KEYS[1], 'XX', 0, '0')
end
return 1
`)

// wholeMarkerScore is the complete marker's score in a set that holds the
// whole history; 0 says it holds a newest prefix.
const wholeMarkerScore = -0.5

// unlockScript deletes a lock only if it still holds our token.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)
