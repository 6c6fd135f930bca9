package feed

import "github.com/redis/go-redis/v9"

// The scripts keep every feed and timeline a complete newest prefix of the
// truth, or its whole history, in the layout of encoding.go. Each asks the
// same questions of the set it changes: is it missing, under rebuild,
// whole, a prefix (and then what is its bound: its lowest entry), and does
// the change leave it a prefix of nothing.
//
// Entries are 8-byte big-endian ids, compared after struct.unpack (Lua's
// string comparison follows the server's locale, and its numbers are exact
// to 2^53, far above any post id a sequence hands out). Every script reads
// a head with MGET, which answers false for a key of another type — a
// sorted set left by an older version — so such a key reads as missing and
// is overwritten.

// luaCommon is put before every script that changes a set.
const luaCommon = `
local MAGIC, HEADER = 241, 22
local COMPLETE, WHOLE = 1, 2
local NOTOKEN = string.rep('\0', 8)

local function num(s, pos) return (struct.unpack('>I8', s, pos)) end
local function pack(id) return struct.pack('>I8', id) end

-- A set's head, parsed; nil when the key is missing or holds anything else.
local function parseHead(v)
  if type(v) ~= 'string' or #v < HEADER or string.byte(v, 1) ~= MAGIC or (#v - HEADER) % 8 ~= 0 then
    return nil
  end
  return {flags = string.byte(v, 2), token = string.sub(v, 3, 10), asOf = num(v, 11),
          tailN = (struct.unpack('>I4', v, 19)), recent = string.sub(v, HEADER + 1)}
end

local function headValue(h)
  return string.char(MAGIC, h.flags) .. h.token .. pack(h.asOf) .. struct.pack('>I4', h.tailN) .. h.recent
end

local function getHead(k) return parseHead(redis.call('MGET', k)[1]) end

local function building(h) return h.token ~= NOTOKEN end

-- A complete set that is not whole: its lowest entry is its bound.
local function prefix(h) return not building(h) and bit.band(h.flags, WHOLE + COMPLETE) == COMPLETE end

-- Every entry of a set, ascending: the older ones, then the recent ones;
-- nil when the older ones are not all there (a key lost or expired apart
-- from its head), and the set must be treated as missing.
local function entries(h, tk)
  if h.tailN == 0 then return h.recent end
  local t = redis.call('MGET', tk)[1]
  if type(t) ~= 'string' or #t ~= 8 * h.tailN then return nil end
  return t .. h.recent
end

-- Writes entries p (packed, ascending) back: a complete set trimmed to
-- maxlen (nil: no trim), and a whole one that lost entries so is whole no
-- more; the newest entry in the head, the rest in the tail key, which
-- expires with the head. The head keeps its time to live.
local function store(hk, tk, h, p, maxlen)
  if maxlen and not building(h) and bit.band(h.flags, COMPLETE) ~= 0 and #p > 8 * maxlen then
    p = string.sub(p, -8 * maxlen)
    h.flags = bit.band(h.flags, bit.bnot(WHOLE))
  end
  h.recent = string.sub(p, -8)
  local tail = string.sub(p, 1, #p - #h.recent)
  h.tailN = #tail / 8
  redis.call('SET', hk, headValue(h), 'KEEPTTL')
  if #tail == 0 then
    redis.call('DEL', tk)
  else
    local ttl = redis.call('PTTL', hk)
    if ttl > 0 then redis.call('SET', tk, tail, 'PX', ttl) else redis.call('SET', tk, tail) end
  end
end

-- A complete set that is not whole and holds no post any more is a prefix
-- of nothing: it knows no bound, so it goes (with the user's following
-- hash, fk, when given), and the next read rebuilds it.
local function dropIfEmptyPrefix(hk, tk, h, fk)
  if prefix(h) and #h.recent == 0 then
    redis.call('DEL', hk, tk)
    if fk then redis.call('DEL', fk) end
    return true
  end
  return false
end

-- The index (from 1) of the first entry of p that is >= id; #p/8 + 1 if none.
local function search(p, id)
  local lo, hi = 1, #p / 8 + 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if num(p, 8 * mid - 7) < id then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- p with id in its place, whether it was new, and its index.
local function insert(p, id)
  local i = search(p, id)
  if i <= #p / 8 and num(p, 8 * i - 7) == id then return p, false, i end
  return string.sub(p, 1, 8 * i - 8) .. pack(id) .. string.sub(p, 8 * i - 7), true, i
end

-- p without the entries of ids (numbers), and how many went: a binary
-- search each for a few, one pass for many.
local function removeIds(p, ids)
  local removed = 0
  if #ids <= 16 then
    for _, id in ipairs(ids) do
      local i = search(p, id)
      if i <= #p / 8 and num(p, 8 * i - 7) == id then
        p = string.sub(p, 1, 8 * i - 8) .. string.sub(p, 8 * i + 1)
        removed = removed + 1
      end
    end
    return p, removed
  end
  local gone = {}
  for _, id in ipairs(ids) do gone[id] = true end
  local kept = {}
  for pos = 1, #p, 8 do
    if gone[num(p, pos)] then removed = removed + 1 else kept[#kept + 1] = string.sub(p, pos, pos + 7) end
  end
  return table.concat(kept), removed
end

-- The union of two packed ascending lists, ascending, without repeats.
local function union(a, b)
  if #a == 0 then return b end
  if #b == 0 then return a end
  local out, i, j = {}, 1, 1
  while i <= #a and j <= #b do
    local x, y = num(a, i), num(b, j)
    if x < y then out[#out + 1] = string.sub(a, i, i + 7); i = i + 8
    elseif y < x then out[#out + 1] = string.sub(b, j, j + 7); j = j + 8
    else out[#out + 1] = string.sub(a, i, i + 7); i = i + 8; j = j + 8 end
  end
  out[#out + 1] = string.sub(a, i)
  out[#out + 1] = string.sub(b, j)
  return table.concat(out)
end

local function drop(hk, tk, fk)
  redis.call('DEL', hk, tk)
  if fk then redis.call('DEL', fk) end
end

local function numbers(from)
  local ids = {}
  for i = from, #ARGV do ids[#ids + 1] = tonumber(ARGV[i]) end
  return ids
end
`

// pushScript adds one post (ARGV[1]) by ARGV[4] to every set among KEYS
// that exists. The common case — the post is newer than every entry — is
// one APPEND to the head; once the head holds ARGV[3] recent entries they
// move to the tail, and a complete set is trimmed back to max_len
// (ARGV[2]) then: the cost of a trim is paid once per ARGV[3] pushes, and
// reads, which take the newest, never see the difference. A set under
// rebuild is not trimmed (the rebuild's finish trims it, after merging what
// it read: a post trimmed before would be missing above the bound). A post
// older than every post of a complete prefix is left out: it would leave a
// gap above it (reads find it in PostgreSQL); that includes a prefix of
// nothing.
//
// For feeds (ARGV[4] not empty), KEYS come in threes: each feed's head and
// tail, then its reader's following hash, and a post goes only into the
// feed of a reader who follows its author. ARGV[6] is the PostgreSQL write
// position read before the page of followers: a feed whose last rebuild or
// unfollow happened at or after it (the head's "as of") may have lost the
// author since the page was read, and its following hash decides; every
// other feed's reader followed the author when the page was read and has
// not unfollowed anyone since, so no lookup is needed. A feed under rebuild
// always asks the hash; when the hash is not complete (under rebuild, or
// lost) the feed takes the post and the hash records its author (field
// "p<post id>", kept ARGV[5] seconds), so that the rebuild's finish removes
// it if the reader does not follow the author.
//
// One call serves a page of followers, so the cost of running a script, and
// of reading the heads (one MGET), is paid once per page instead of once
// per follower; in a Redis Cluster, where a script may only touch keys of
// one slot, it is called with one feed at a time. It returns how many sets
// gained the post.
var pushScript = redis.NewScript(luaCommon + `
local id = tonumber(ARGV[1])
local e = pack(id)
local maxlen, spillAt = tonumber(ARGV[2]), tonumber(ARGV[3])
local author = ARGV[4]
local asOf = tonumber(ARGV[6])
local step = 2
if author ~= '' then step = 3 end
local heads = {}
for i = 1, #KEYS, step do heads[#heads + 1] = KEYS[i] end
local values = redis.call('MGET', unpack(heads))
local added = 0
for j = 1, #heads do
  local v = values[j]
  if type(v) == 'string' and #v >= HEADER and string.byte(v, 1) == MAGIC and (#v - HEADER) % 8 == 0 then
    local i = (j - 1) * step + 1
    local hk, tk, fk = KEYS[i], KEYS[i + 1], KEYS[i + 2]
    local ok = true
    if step == 3 and (string.sub(v, 3, 10) ~= NOTOKEN or num(v, 11) >= asOf) then
      if redis.call('HEXISTS', fk, author) == 0 then
        if redis.call('HEXISTS', fk, 'v') == 1 then
          ok = false -- the reader does not follow the author
        else
          redis.call('HSET', fk, 'p' .. ARGV[1], author)
          redis.call('EXPIRE', fk, ARGV[5])
        end
      end
    end
    local n = (#v - HEADER) / 8
    if not ok then
      -- not for this reader
    elseif n > 0 and num(v, #v - 7) < id then
      redis.call('APPEND', hk, e)
      added = added + 1
      if n + 1 >= spillAt then
        local h = parseHead(v .. e)
        local p = entries(h, tk)
        if p then store(hk, tk, h, p, maxlen) else drop(hk, tk, nil) end
      end
    elseif n == 0 or num(v, #v - 7) > id then
      -- older than the newest entry: into its place, if it is not there
      local h = parseHead(v)
      local p = entries(h, tk)
      if not p then
        drop(hk, tk, nil)
      else
        local q, new, at = insert(p, id)
        if new and not (at == 1 and prefix(h)) then
          store(hk, tk, h, q, maxlen)
          added = added + 1
        end
      end
    end
  end
end
return added
`)

// followScript records that the reader follows ARGV[1] in their following
// hash (KEYS[3]), kept for ARGV[2] seconds more, if their feed (head
// KEYS[1], tail KEYS[2]) is complete: from then on pushes of the followee's
// posts land in the feed. A feed under rebuild, or without its following
// hash, is dropped instead: the next read rebuilds it with the new follow.
// It returns 1 when the feed is there to merge into, 0 when there is none
// (any more).
var followScript = redis.NewScript(luaCommon + `
local hk, tk, fk = KEYS[1], KEYS[2], KEYS[3]
local h = getHead(hk)
if not h or building(h) or redis.call('HEXISTS', fk, 'v') == 0 then
  drop(hk, tk, fk)
  return 0
end
redis.call('HSET', fk, ARGV[1], 1)
redis.call('HINCRBY', fk, 'v', 1)
redis.call('EXPIRE', fk, ARGV[2])
return 1
`)

// mergeScript merges posts (ARGV[4..]) of a followee (ARGV[3]) into the
// reader's feed after followScript, then trims it to ARGV[1] entries; it
// does nothing if the feed was dropped or the reader unfollowed since (the
// following hash, KEYS[3], says). When ARGV[2] (the floor) is not 0 the
// merged posts may not be all the followee's posts down to the feed's
// bound, so entries older than the floor are dropped first and the floor is
// the bound from then on (with no posts to merge, the floor is above every
// post of the followee). Posts below the bound are left out. It returns how
// many posts it added.
var mergeScript = redis.NewScript(luaCommon + `
local hk, tk, fk = KEYS[1], KEYS[2], KEYS[3]
local h = getHead(hk)
if not h or building(h) or redis.call('HEXISTS', fk, 'v') == 0
    or redis.call('HEXISTS', fk, ARGV[3]) == 0 then
  return 0
end
local p = entries(h, tk)
if not p then
  drop(hk, tk, fk)
  return 0
end
local bound = nil -- nil: the feed is whole
if bit.band(h.flags, WHOLE) == 0 then
  if #p == 0 then -- cannot be: the scripts drop empty prefixes
    drop(hk, tk, fk)
    return 0
  end
  bound = num(p, 1)
end
local floor = tonumber(ARGV[2])
if floor > 0 then
  p = string.sub(p, 8 * search(p, floor) - 7)
  h.flags = bit.band(h.flags, bit.bnot(WHOLE))
  if bound == nil or bound < floor then bound = floor end
end
local added = 0
for _, id in ipairs(numbers(4)) do
  if bound == nil or id >= bound then
    local new
    p, new = insert(p, id)
    if new then added = added + 1 end
  end
end
store(hk, tk, h, p, tonumber(ARGV[1]))
dropIfEmptyPrefix(hk, tk, h, fk)
return added
`)

// unfollowScript records that the reader no longer follows ARGV[1] (the
// following hash kept for ARGV[2] seconds more) and removes posts
// (ARGV[5..]) from their feed: the followee's posts at or above ARGV[3],
// the lowest entry the caller saw ("-": none), read from PostgreSQL after
// that. If the feed now holds a post below it (a rebuild finished in
// between), the ids may not cover the feed: nothing is changed and it
// returns -1, and the caller looks again. ARGV[4], the PostgreSQL write
// position read after the unfollow was committed, becomes the feed's "as
// of": a fan-out whose page of followers was read before it asks the
// following hash before it pushes (see pushScript). A feed under rebuild is
// dropped instead: the rebuild read PostgreSQL before the unfollow and
// would put the posts back; the next read rebuilds it without them. So is a
// feed without its following hash. It returns how many posts it removed.
var unfollowScript = redis.NewScript(luaCommon + `
local hk, tk, fk = KEYS[1], KEYS[2], KEYS[3]
local h = getHead(hk)
local p = h and entries(h, tk)
if not p or building(h) or redis.call('HEXISTS', fk, 'v') == 0 then
  drop(hk, tk, fk)
  return 0
end
if #p > 0 and (ARGV[3] == '-' or num(p, 1) < tonumber(ARGV[3])) then
  return -1
end
redis.call('HDEL', fk, ARGV[1])
redis.call('HINCRBY', fk, 'v', 1)
redis.call('EXPIRE', fk, ARGV[2])
local removed
p, removed = removeIds(p, numbers(5))
h.asOf = math.max(h.asOf, tonumber(ARGV[4]))
store(hk, tk, h, p, nil)
dropIfEmptyPrefix(hk, tk, h, fk)
return removed
`)

// removeScript takes posts (ARGV) out of every set among KEYS (head, tail
// pairs: a deleted post leaving its author's followers' feeds), dropping a
// set left a prefix of nothing. Posts newer than a set's older entries are
// looked for in its head alone. It returns how many entries it removed.
var removeScript = redis.NewScript(luaCommon + `
local ids = numbers(1)
local lowest = math.huge
for _, id in ipairs(ids) do lowest = math.min(lowest, id) end
local heads = {}
for i = 1, #KEYS, 2 do heads[#heads + 1] = KEYS[i] end
local values = redis.call('MGET', unpack(heads))
local removed = 0
for j = 1, #heads do
  local h = parseHead(values[j])
  if h then
    local hk, tk = KEYS[2 * j - 1], KEYS[2 * j]
    local recent, n = removeIds(h.recent, ids)
    if h.tailN == 0 or (#recent > 0 and lowest >= num(h.recent, 1)) then
      -- only the head may hold them, and it keeps an entry (the newest
      -- entry stays in the head while the tail holds any)
      if n > 0 then
        h.recent = recent
        redis.call('SET', hk, headValue(h), 'KEEPTTL')
        dropIfEmptyPrefix(hk, tk, h, nil)
      end
    else
      local p = entries(h, tk)
      if not p then
        drop(hk, tk, nil)
        n = 0
      else
        p, n = removeIds(p, ids)
        if n > 0 then
          store(hk, tk, h, p, nil)
          dropIfEmptyPrefix(hk, tk, h, nil)
        end
      end
    end
    removed = removed + n
  end
end
return removed
`)

// finishRebuildScript completes a rebuild of a set (head KEYS[1], tail
// KEYS[2]) if its token (ARGV[4]) is still in the head — nobody dropped the
// set meanwhile, as follows and unfollows do, and no later rebuild took
// over: it adds the posts (the last argument: ids packed as the set stores
// them, ascending) to those pushed meanwhile, marks the set complete — and
// whole when ARGV[3] is 1: the posts are the whole history —, trims it to
// ARGV[1], sets its "as of" to ARGV[7] (the PostgreSQL write position read
// after the rebuild read PostgreSQL) and lets it expire after ARGV[2]
// seconds without reads. For a feed, KEYS[3] is the reader's following
// hash: the posts pushed meanwhile whose author it recorded ("p<id>") go
// unless the reader follows the author, and it is written anew with version
// ARGV[6] (random, so that no version of a hash is ever seen twice) and the
// ARGV[5] followee ids that follow. It returns 1 when the set is complete
// now, 0 when the rebuild gave up.
var finishRebuildScript = redis.NewScript(luaCommon + `
local hk, tk, fk = KEYS[1], KEYS[2], KEYS[3]
local h = getHead(hk)
if not h or h.token ~= ARGV[4] then return 0 end
local p = entries(h, tk)
if not p then
  drop(hk, tk, nil)
  return 0
end
local nFollowees = tonumber(ARGV[5])
if fk then
  if redis.call('HEXISTS', fk, 'v') == 0 then
    local followed = {}
    for i = 8, 7 + nFollowees do followed[ARGV[i]] = true end
    local gone = {}
    local fields = redis.call('HGETALL', fk)
    for j = 1, #fields, 2 do
      if string.sub(fields[j], 1, 1) == 'p' and not followed[fields[j + 1]] then
        gone[#gone + 1] = tonumber(string.sub(fields[j], 2))
      end
    end
    p = removeIds(p, gone)
  end
  redis.call('DEL', fk)
  redis.call('HSET', fk, 'v', ARGV[6])
  for i = 8, 7 + nFollowees do
    redis.call('HSET', fk, ARGV[i], 1)
  end
  redis.call('EXPIRE', fk, ARGV[2])
end
p = union(p, ARGV[#ARGV])
h.token = NOTOKEN
h.flags = COMPLETE
if ARGV[3] == '1' then h.flags = COMPLETE + WHOLE end
h.asOf = tonumber(ARGV[7])
redis.call('EXPIRE', hk, ARGV[2])
store(hk, tk, h, p, tonumber(ARGV[1]))
return 1
`)

// unlockScript deletes a lock only if it still holds our token.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)
