package feed

import "github.com/redis/go-redis/v9"

// pushScript adds one post to one feed if the feed exists, then trims it to
// ARGV[2] entries, keeping the marker at rank 0. It returns 1 when it added
// the post, 0 when the post was there already, -1 when there is no feed.
var pushScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local added = redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[1], 1, -(tonumber(ARGV[2]) + 1))
return added
`)

// pushManyScript is pushScript for many feeds (KEYS) in one call: the cost of
// running a script is paid once per page of followers instead of once per
// follower, which brings a fan-out close to plain pipelined ZADD. The trim
// runs only when a feed is over its length. Scripts may only touch keys of
// one slot in a Redis Cluster, so there pushScript is pipelined instead.
// It returns how many feeds gained the post.
var pushManyScript = redis.NewScript(`
local maxlen = tonumber(ARGV[2])
local added = 0
for i = 1, #KEYS do
  local n = redis.call('ZCARD', KEYS[i]) -- 0: no feed (a feed holds its marker)
  if n > 0 then
    added = added + redis.call('ZADD', KEYS[i], ARGV[1], ARGV[1])
    if n > maxlen then
      redis.call('ZREMRANGEBYRANK', KEYS[i], 1, -(maxlen + 1))
    end
  end
end
return added
`)

// mergeScript adds several posts (ARGV[3..]) to one feed if it exists, then
// trims to ARGV[1] entries. When ARGV[2] is not 0, entries older than it are
// removed first: the merged posts may not be all the author's posts down to
// the feed's oldest entry, and a feed must hold every post down to its
// oldest, or reads would skip the missing ones (older pages come from
// PostgreSQL instead). It returns how many it added, or -1 when there is no feed.
var mergeScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if ARGV[2] ~= '0' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], 1, '(' .. ARGV[2])
end
local added = 0
for i = 3, #ARGV do
  added = added + redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i])
end
redis.call('ZREMRANGEBYRANK', KEYS[1], 1, -(tonumber(ARGV[1]) + 1))
return added
`)

// finishRebuildScript completes a rebuild: if the placeholder is still there
// (nobody dropped the feed meanwhile, as an unfollow does), it adds the posts
// (ARGV[3..]), swaps the placeholder for the complete marker, trims to
// ARGV[1] and lets the feed expire after ARGV[2] seconds without reads. It
// returns 1 when the feed is now complete, 0 when it gave up.
var finishRebuildScript = redis.NewScript(`
if not redis.call('ZSCORE', KEYS[1], '-1') then return 0 end
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i])
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[1], 0, '0')
redis.call('ZREM', KEYS[1], '-1')
redis.call('ZREMRANGEBYRANK', KEYS[1], 1, -(tonumber(ARGV[1]) + 1))
return 1
`)

// unlockScript deletes a lock only if it still holds our token.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)
