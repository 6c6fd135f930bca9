package feed

import "github.com/redis/go-redis/v9"

// The scripts keep every feed and timeline a complete newest prefix of the
// truth, or its whole history (see the package doc for the markers). Each
// asks the same questions of the set it changes: is it missing, under
// rebuild, whole, a prefix (and then what is its bound), and does the change
// leave it a prefix of nothing. Trimming removes from rank 1 up, keeping the
// marker at rank 0: the first trim of a whole set removes "w" with its oldest
// posts, so it is a prefix from then on at no extra cost.

// luaCommon is put before every script that changes a set.
const luaCommon = `
-- A set under rebuild holds one placeholder or more at score -1.
local function building(k)
  return redis.call('ZCOUNT', k, -1, -1) > 0
end

-- A complete set that is not whole and holds no post any more is a prefix
-- of nothing: it knows no bound, so it goes (with the user's following
-- hash, fk, when given), and the next read rebuilds it.
local function dropIfEmptyPrefix(k, fk)
  if redis.call('ZCARD', k) == 1 and redis.call('ZSCORE', k, '0') then
    redis.call('DEL', k)
    if fk then redis.call('DEL', fk) end
    return true
  end
  return false
end

-- ZREM of many members, in slices that Lua's unpack can take.
local function zremMany(k, members, from)
  local removed = 0
  for i = from, #members, 1000 do
    removed = removed + redis.call('ZREM', k, unpack(members, i, math.min(i + 999, #members)))
  end
  return removed
end

-- Back to maxlen posts once the set holds more than maxlen + slack
-- entries (markers included), keeping the marker at rank 0.
local function trim(k, maxlen, slack)
  if redis.call('ZCARD', k) > maxlen + 1 + slack then
    redis.call('ZREMRANGEBYRANK', k, 1, -(maxlen + 1))
  end
end
`

// pushScript adds one post (ARGV[1]) by ARGV[4] to every set among KEYS
// that exists, and trims a complete set back to max_len (ARGV[2]) once it
// holds ARGV[3] entries more: trimming is most of a push's cost once feeds
// are full, and reads, which take the newest, never see the difference. A
// set under rebuild is not trimmed (the rebuild's finish trims it, after
// merging what it read: a post trimmed before would be missing above the
// bound). A post older than every post of a complete prefix is left out: it
// would leave a gap above it (reads find it in PostgreSQL); that includes a
// set holding only its marker.
//
// For feeds (ARGV[4] not empty), KEYS come in pairs: each feed, then its
// reader's following hash, and a post goes only into the feed of a reader
// who follows its author by the hash — a fan-out that read its page of
// followers before an unfollow writes nothing after it. A feed whose hash is
// not complete (under rebuild, or lost) takes the post and the hash records
// its author (field "p<post id>", kept ARGV[5] seconds), so that the
// rebuild's finish removes it if the reader does not follow the author.
//
// One call serves a page of followers, so the cost of running a script is
// paid once per page instead of once per follower; in a Redis Cluster,
// where a script may only touch keys of one slot, it is called with one
// feed at a time. It returns how many sets gained the post.
var pushScript = redis.NewScript(luaCommon + `
local id = ARGV[1]
local maxlen = tonumber(ARGV[2])
local trimAt = maxlen + tonumber(ARGV[3])
local author = ARGV[4]
local step = 1
if author ~= '' then step = 2 end
local added = 0
for i = 1, #KEYS, step do
  local k = KEYS[i]
  local n = redis.call('ZCARD', k) -- 0: no set (a set holds a marker)
  local ok = n > 0
  if ok and step == 2 and redis.call('HEXISTS', KEYS[i + 1], author) == 0 then
    local fk = KEYS[i + 1]
    if redis.call('HEXISTS', fk, 'v') == 1 then
      ok = false -- the reader does not follow the author
    else
      redis.call('HSET', fk, 'p' .. id, author)
      redis.call('EXPIRE', fk, ARGV[5])
    end
  end
  if ok then
    local a = redis.call('ZADD', k, id, id)
    if n > trimAt then
      if redis.call('ZSCORE', k, '0') then
        redis.call('ZREMRANGEBYRANK', k, 1, -(maxlen + 1))
      end
    elseif a == 1 and redis.call('ZRANK', k, id) == 1 and redis.call('ZSCORE', k, '0') then
      -- rank 1 of a complete set: below every post of a prefix ("w"
      -- holds rank 1 of a whole set, so this is never one)
      redis.call('ZREM', k, id)
      a = 0
    end
    added = added + a
  end
end
return added
`)

// followScript records that the reader follows ARGV[1] in their following
// hash (KEYS[2]), kept for ARGV[2] seconds more, if their feed (KEYS[1]) is
// complete: from then on pushes of the followee's posts land in the feed. A
// feed under rebuild, or without its following hash, is dropped instead:
// the next read rebuilds it with the new follow. It returns 1 when the feed
// is there to merge into, 0 when there is none (any more).
var followScript = redis.NewScript(luaCommon + `
local k, fk = KEYS[1], KEYS[2]
if redis.call('EXISTS', k) == 0 or building(k) or redis.call('HEXISTS', fk, 'v') == 0 then
  redis.call('DEL', k, fk)
  return 0
end
redis.call('HSET', fk, ARGV[1], 1)
redis.call('HINCRBY', fk, 'v', 1)
redis.call('EXPIRE', fk, ARGV[2])
return 1
`)

// mergeScript merges posts (ARGV[4..]) of a followee (ARGV[3]) into the
// reader's feed (KEYS[1]) after followScript, then trims it to ARGV[1]
// entries; it does nothing if the feed was dropped or the reader unfollowed
// since (KEYS[2], the following hash, says). When ARGV[2] (the floor) is not
// 0 the merged posts may not be all the followee's posts down to the feed's
// bound, so entries older than the floor are dropped first and the floor is
// the bound from then on (with no posts to merge, the floor is above every
// post of the followee). Posts below the bound are left out. It returns how
// many posts it added.
var mergeScript = redis.NewScript(luaCommon + `
local k, fk = KEYS[1], KEYS[2]
if redis.call('EXISTS', k) == 0 or building(k) or redis.call('HEXISTS', fk, 'v') == 0
    or redis.call('HEXISTS', fk, ARGV[3]) == 0 then
  return 0
end
local bound = nil -- nil: the feed is whole
if not redis.call('ZSCORE', k, 'w') then
  local low = redis.call('ZRANGEBYSCORE', k, 1, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #low == 0 then -- cannot be: the scripts drop empty prefixes
    redis.call('DEL', k, fk)
    return 0
  end
  bound = tonumber(low[2])
end
local floor = tonumber(ARGV[2])
if floor > 0 then
  redis.call('ZREMRANGEBYSCORE', k, 1, '(' .. ARGV[2])
  redis.call('ZREM', k, 'w')
  if bound == nil or bound < floor then bound = floor end
end
local added = 0
for i = 4, #ARGV do
  if bound == nil or tonumber(ARGV[i]) >= bound then
    added = added + redis.call('ZADD', k, ARGV[i], ARGV[i])
  end
end
trim(k, tonumber(ARGV[1]), 0)
dropIfEmptyPrefix(k, fk)
return added
`)

// unfollowScript records that the reader no longer follows ARGV[1] (the
// following hash kept for ARGV[2] seconds more) and removes posts
// (ARGV[4..]) from their feed: the followee's posts at or above ARGV[3],
// the lowest entry the caller saw ("-": none), read from PostgreSQL after
// that. If the feed now holds a post below it (a rebuild finished in
// between), the ids may not cover the feed: nothing is changed and it
// returns -1, and the caller looks again. A feed under rebuild is dropped
// instead: the rebuild read PostgreSQL before the unfollow and would put
// the posts back; the next read rebuilds it without them. So is a feed
// without its following hash. It returns how many posts it removed.
var unfollowScript = redis.NewScript(luaCommon + `
local k, fk = KEYS[1], KEYS[2]
if redis.call('EXISTS', k) == 0 or building(k) or redis.call('HEXISTS', fk, 'v') == 0 then
  redis.call('DEL', k, fk)
  return 0
end
local low = redis.call('ZRANGEBYSCORE', k, 1, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if #low > 0 and (ARGV[3] == '-' or tonumber(low[2]) < tonumber(ARGV[3])) then
  return -1
end
redis.call('HDEL', fk, ARGV[1])
redis.call('HINCRBY', fk, 'v', 1)
redis.call('EXPIRE', fk, ARGV[2])
local removed = zremMany(k, ARGV, 4)
dropIfEmptyPrefix(k, fk)
return removed
`)

// removeScript takes posts (ARGV) out of every set among KEYS (a deleted
// post leaving its author's followers' feeds), dropping a set left a prefix
// of nothing. It returns how many entries it removed.
var removeScript = redis.NewScript(luaCommon + `
local removed = 0
for i = 1, #KEYS do
  local n = zremMany(KEYS[i], ARGV, 1)
  if n > 0 then dropIfEmptyPrefix(KEYS[i], nil) end
  removed = removed + n
end
return removed
`)

// finishRebuildScript completes a rebuild of KEYS[1], if its placeholder
// (ARGV[4]) is still there — nobody dropped the set meanwhile, as follows
// and unfollows do, and no later rebuild took over: it adds the posts,
// replaces every placeholder with the complete marker — and "w" when ARGV[3]
// is 1: the posts are the whole history —, trims to ARGV[1] and lets the set
// expire after ARGV[2] seconds without reads. For a feed, KEYS[2] is the
// reader's following hash: the posts pushed meanwhile whose author it
// recorded ("p<id>") go unless the reader follows the author, and it is
// written anew with version ARGV[6] (random, so that no version of a hash is
// ever seen twice) and the ARGV[5] followee ids that follow; the post ids
// come last. It returns 1 when the set is complete now, 0 when the rebuild
// gave up.
var finishRebuildScript = redis.NewScript(luaCommon + `
local k = KEYS[1]
if not redis.call('ZSCORE', k, ARGV[4]) then return 0 end
local nFollowees = tonumber(ARGV[5])
for i = 7 + nFollowees, #ARGV do
  redis.call('ZADD', k, ARGV[i], ARGV[i])
end
if #KEYS > 1 then
  local fk = KEYS[2]
  if redis.call('HEXISTS', fk, 'v') == 0 then
    local followed = {}
    for i = 7, 6 + nFollowees do followed[ARGV[i]] = true end
    local fields = redis.call('HGETALL', fk)
    for j = 1, #fields, 2 do
      if string.sub(fields[j], 1, 1) == 'p' and not followed[fields[j + 1]] then
        redis.call('ZREM', k, string.sub(fields[j], 2))
      end
    end
  end
  redis.call('DEL', fk)
  redis.call('HSET', fk, 'v', ARGV[6])
  for i = 7, 6 + nFollowees do
    redis.call('HSET', fk, ARGV[i], 1)
  end
  redis.call('EXPIRE', fk, ARGV[2])
end
redis.call('ZREMRANGEBYSCORE', k, -1, -1)
redis.call('ZADD', k, 0, '0')
if ARGV[3] == '1' then redis.call('ZADD', k, 0.5, 'w') end
trim(k, tonumber(ARGV[1]), 0)
redis.call('EXPIRE', k, ARGV[2])
return 1
`)

// unlockScript deletes a lock only if it still holds our token.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)
