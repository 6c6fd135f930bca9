package feed

import "github.com/redis/go-redis/v9"

// The scripts keep every feed and timeline a complete newest prefix of the
// truth: the set holds every post it should down to its lowest entry, and
// reads go on in PostgreSQL below that. Besides the complete marker "0"
// (rank 0), a set that holds the whole history has the member "w" (score
// 0.5, rank 1): reads that run out of it need not ask PostgreSQL. Trimming
// removes from rank 1 up, so the first trim of a whole set removes "w"
// with its oldest posts: it is a prefix from then on, at no extra cost.

// pushScript adds one post (ARGV[1]) to one set if the set exists, then trims
// it to ARGV[2] entries, keeping the marker at rank 0. An id older than every
// post of a complete prefix is left out: it would leave a gap above it
// (reads find it in PostgreSQL). It returns 1 when it added the post, 0 when
// it did not, -1 when there is no set.
var pushScript = redis.NewScript(`
local n = redis.call('ZCARD', KEYS[1])
if n == 0 then return -1 end
local added = redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1])
if n > tonumber(ARGV[2]) then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 1, -(tonumber(ARGV[2]) + 1))
elseif added == 1 and n > 1 and redis.call('ZRANK', KEYS[1], ARGV[1]) == 1
    and redis.call('ZSCORE', KEYS[1], '0') then
  redis.call('ZREM', KEYS[1], ARGV[1])
  added = 0
end
return added
`)

// pushManyScript is pushScript for many feeds (KEYS) in one call: the cost of
// running a script is paid once per page of followers instead of once per
// follower, which brings a fan-out closer to plain pipelined ZADD. A full
// feed is trimmed back to max_len (ARGV[2]) once it holds ARGV[3] entries
// more, not on every push: trimming is most of a push's cost once feeds are
// full, and reads, which take the newest, never see the difference. Scripts
// may only touch keys of one slot in a Redis Cluster, so there pushScript is
// pipelined instead. It returns how many feeds gained the post.
var pushManyScript = redis.NewScript(`
local maxlen = tonumber(ARGV[2])
local trimAt = maxlen + tonumber(ARGV[3])
local added = 0
for i = 1, #KEYS do
  local k = KEYS[i]
  local n = redis.call('ZCARD', k) -- 0: no feed (a feed holds its marker)
  if n > 0 then
    local a = redis.call('ZADD', k, ARGV[1], ARGV[1])
    if n > trimAt then
      redis.call('ZREMRANGEBYRANK', k, 1, -(maxlen + 1))
    elseif a == 1 and n > 1 and redis.call('ZRANK', k, ARGV[1]) == 1
        and redis.call('ZSCORE', k, '0') then
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
// lowest entry, so entries older than ARGV[2] are dropped first (and the feed
// is a prefix from then on). Posts older than the lowest entry of a prefix
// are left out. A feed under rebuild, or a prefix with no posts left, is
// dropped instead: the next read rebuilds it with the new follow. It returns
// how many it added, or -1 when there is no feed (any more).
var mergeScript = redis.NewScript(`
local k = KEYS[1]
if redis.call('EXISTS', k) == 0 then return -1 end
if redis.call('ZSCORE', k, '-1') then
  redis.call('DEL', k)
  return -1
end
if ARGV[2] ~= '0' then
  redis.call('ZREMRANGEBYSCORE', k, 1, '(' .. ARGV[2])
  redis.call('ZREM', k, 'w')
end
local lowest = nil
if not redis.call('ZSCORE', k, 'w') then
  local low = redis.call('ZRANGEBYSCORE', k, 1, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
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
// (ARGV[4..]), swaps the placeholder for the complete marker — and adds "w"
// when ARGV[3] is 1: the posts are the whole history — trims to ARGV[1] and
// lets the set expire after ARGV[2] seconds without reads. It returns 1 when
// the set is now complete, 0 when it gave up.
var finishRebuildScript = redis.NewScript(`
if not redis.call('ZSCORE', KEYS[1], '-1') then return 0 end
for i = 4, #ARGV do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i])
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[1], 0, '0')
if ARGV[3] == '1' then redis.call('ZADD', KEYS[1], 0.5, 'w') end
redis.call('ZREM', KEYS[1], '-1')
if redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[1]) + 1 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 1, -(tonumber(ARGV[1]) + 1))
end
return 1
`)

// unlockScript deletes a lock only if it still holds our token.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// wholeMarker is the member that says a set holds the whole history.
const wholeMarker = "w"
