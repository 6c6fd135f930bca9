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
// to 2^53, far above any post id a sequence hands out). Large strings are
// slow to make in Redis' Lua (about 20 µs for 6 KB), and so are many small
// ones (string.format of 50 ids, 27 µs), so no common path builds either: a
// push appends to the head or rewrites its bytes in place, a spill pushes
// the head's older entries onto the tail as one chunk and trims the tail's
// oldest chunk. Every script reads a head with MGET, which answers false
// for a key of another type — a sorted set left by an older version — so
// such a key reads as missing and is overwritten.

// luaCommon is put before every script that changes a set.
const luaCommon = `
local MAGIC, HEADER = 241, 30
local COMPLETE, WHOLE, BUILDING = 1, 2, 4
local NOTOKEN = string.rep('\0', 8)

local function num(s, pos) return (struct.unpack('>I8', s, pos)) end
local function pack(id) return struct.pack('>I8', id) end

-- A set's head, parsed; nil when the key is missing or holds anything else.
local function parseHead(v)
  if type(v) ~= 'string' or #v < HEADER or string.byte(v, 1) ~= MAGIC or (#v - HEADER) % 8 ~= 0 then
    return nil
  end
  return {flags = string.byte(v, 2), token = string.sub(v, 3, 10), asOf = num(v, 11),
          tailN = (struct.unpack('>I4', v, 19)), tailMax = num(v, 23), recent = string.sub(v, HEADER + 1)}
end

local function headValue(h)
  return string.char(MAGIC, h.flags) .. h.token .. pack(h.asOf) .. struct.pack('>I4', h.tailN) .. pack(h.tailMax)
    .. h.recent
end

local function getHead(k) return parseHead(redis.call('MGET', k)[1]) end

local function building(h) return h.token ~= NOTOKEN end

-- A complete set that is not whole: its lowest entry is its bound.
local function prefix(h) return not building(h) and bit.band(h.flags, WHOLE + COMPLETE) == COMPLETE end

local function unpackAll(p)
  local ids = {}
  for pos = 1, #p, 8 do ids[#ids + 1] = num(p, pos) end
  return ids
end

local function packAll(ids, from, to)
  local parts = {}
  for i = from or 1, to or #ids do parts[#parts + 1] = pack(ids[i]) end
  return table.concat(parts)
end

-- The index (from 1) of the first of n ids, got(i), that is >= id; n + 1
-- if none.
local function search(n, got, id)
  local lo, hi = 1, n + 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if got(mid) < id then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- The union of two ascending lists of ids, ascending, without repeats.
local function union(a, b)
  local out, i, j = {}, 1, 1
  while i <= #a or j <= #b do
    local x, y = a[i], b[j]
    if y == nil or (x ~= nil and x < y) then out[#out + 1] = x; i = i + 1
    elseif x == nil or y < x then out[#out + 1] = y; j = j + 1
    else out[#out + 1] = x; i = i + 1; j = j + 1 end
  end
  return out
end

-- Every entry of a set, ascending (the tail's and the head's merged); nil
-- when the tail is not all there (a key lost or expired apart from its
-- head), and the set must be treated as missing.
local function entries(h, tk)
  local tail = {}
  if h.tailN > 0 then
    local t = table.concat(redis.call('LRANGE', tk, 0, -1))
    if #t ~= 8 * h.tailN then return nil end
    tail = unpackAll(t)
  end
  return union(tail, unpackAll(h.recent))
end

-- The tail's chunks hold up to this many entries when a rewrite lays them
-- out (a spill's chunk holds what it moves).
local CHUNK = 64

-- RPUSH of ids[from..to] in chunks.
local function rpushAll(tk, ids, from, to)
  local chunks = {}
  for i = from, to, CHUNK do chunks[#chunks + 1] = packAll(ids, i, math.min(i + CHUNK - 1, to)) end
  if #chunks > 0 then redis.call('RPUSH', tk, unpack(chunks)) end
end

-- The tail lives as long as the head.
local function expireTail(hk, tk)
  local ttl = redis.call('PTTL', hk)
  if ttl > 0 then redis.call('PEXPIRE', tk, ttl) end
end

-- Writes a set's entries (ids, ascending) back: a complete set trimmed to
-- maxlen (nil: no trim), and a whole one that lost entries so is whole no
-- more; the newest keep entries (at least one) in the head, the rest in
-- the tail, which expires with the head. The head keeps its time to live.
local function store(hk, tk, h, ids, maxlen, keep)
  local first = 1
  if maxlen and not building(h) and bit.band(h.flags, COMPLETE) ~= 0 and #ids > maxlen then
    first = #ids - maxlen + 1
    h.flags = bit.band(h.flags, bit.bnot(WHOLE))
  end
  local split = math.max(#ids - math.max(keep or 1, 1), first - 1)
  h.recent = packAll(ids, split + 1, #ids)
  h.tailN = split - first + 1
  h.tailMax = 0
  if h.tailN > 0 then h.tailMax = ids[split] end
  redis.call('SET', hk, headValue(h), 'KEEPTTL')
  redis.call('DEL', tk)
  if h.tailN > 0 then
    rpushAll(tk, ids, first, split)
    expireTail(hk, tk)
  end
end

-- A complete set that is not whole and holds no post any more is a prefix
-- of nothing: it knows no bound, so it goes (with the user's following
-- hash, fk, when given), and the next read rebuilds it.
local function dropIfEmptyPrefix(hk, tk, h, fk)
  if prefix(h) and #h.recent == 0 and h.tailN == 0 then
    redis.call('DEL', hk, tk)
    if fk then redis.call('DEL', fk) end
    return true
  end
  return false
end

local function drop(hk, tk, fk)
  redis.call('DEL', hk, tk)
  if fk then redis.call('DEL', fk) end
end

-- ids (ascending) with id in its place, whether it was new, and its index.
local function insert(ids, id)
  local i = search(#ids, function(k) return ids[k] end, id)
  if ids[i] == id then return ids, false, i end
  table.insert(ids, i, id)
  return ids, true, i
end

-- ids (ascending) without those of gone (a set: id → true), and how many went.
local function without(ids, gone)
  local kept, removed = {}, 0
  for _, id in ipairs(ids) do
    if gone[id] then removed = removed + 1 else kept[#kept + 1] = id end
  end
  return kept, removed
end

local function numbers(from)
  local ids = {}
  for i = from, #ARGV do ids[#ids + 1] = tonumber(ARGV[i]) end
  return ids
end

-- Trims a complete set's tail so that with the head's keep entries it
-- holds maxlen: whole chunks go from its front (LPOP), and the rest of the
-- oldest one's excess is cut in place (LSET).
local function trimTail(tk, h, maxlen, keep)
  if building(h) or bit.band(h.flags, COMPLETE) == 0 then return true end
  local cut = h.tailN + keep - maxlen
  if cut <= 0 then return true end
  h.flags = bit.band(h.flags, bit.bnot(WHOLE))
  while cut > 0 and h.tailN > 0 do
    local c = redis.call('LINDEX', tk, 0)
    if type(c) ~= 'string' then return false end -- the tail is short: lost
    local n = #c / 8
    if n <= cut then
      redis.call('LPOP', tk)
      cut, h.tailN = cut - n, h.tailN - n
    else
      redis.call('LSET', tk, 0, string.sub(c, 8 * cut + 1))
      h.tailN, cut = h.tailN - cut, 0
    end
  end
  if h.tailN == 0 then
    h.tailMax = 0
    redis.call('DEL', tk)
  end
  return true
end

-- Moves the older entries of a head that holds spillAt (v, its value) to
-- the tail as one chunk, keeping its newest keep, and trims a complete set
-- to maxlen. Every head entry is newer than the tail's newest (a post
-- older than that goes into the tail), so the chunk goes at the tail's end.
-- A tail that is not as long as the header says (lost apart from the head)
-- drops the set, which the next read rebuilds.
local function spill(hk, tk, v, maxlen, keep)
  local h = parseHead(v)
  local moveN = #h.recent / 8 - keep
  if moveN <= 0 then return end
  local moved = string.sub(h.recent, 1, 8 * moveN)
  local length = redis.call('LLEN', tk)
  if (h.tailN > 0) ~= (length > 0) or num(moved, 1) <= h.tailMax then
    drop(hk, tk, nil)
    return
  end
  redis.call('RPUSH', tk, moved)
  if length == 0 then expireTail(hk, tk) end
  h.tailN = h.tailN + moveN
  h.tailMax = num(moved, #moved - 7)
  if not trimTail(tk, h, maxlen, keep) then
    drop(hk, tk, nil)
    return
  end
  h.recent = string.sub(h.recent, 8 * moveN + 1)
  redis.call('SET', hk, headValue(h), 'KEEPTTL')
end
`

// pushScript adds one post (ARGV[1]) by ARGV[4] to every set among KEYS
// that exists. The common case — the post is newer than every entry — is
// one APPEND to the head; a post older than the newest (fan-outs side by
// side finish in any order) is written in place: into the head's bytes
// (SETRANGE), or into the tail's chunk that covers it (LSET), found by
// walking back from the newest chunk. Once the head holds ARGV[3] entries, the older half moves to the
// tail, and a complete set is trimmed back to max_len (ARGV[2]) then: the
// cost of a trim is paid once per ARGV[3]/2 pushes, and reads, which take
// the newest, never see the difference. A set under rebuild is not trimmed
// (the rebuild's finish trims it, after merging what it read: a post
// trimmed before would be missing above the bound). A post older than
// every post of a complete prefix is left out: it would leave a gap above
// it (reads find it in PostgreSQL); that includes a prefix of nothing.
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
local keep = math.max(math.floor(spillAt / 2), 1)
-- how many of the tail's chunks a late push walks back (each an LINDEX)
-- before it rewrites the set instead
local maxWalk = 16
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
    if step == 3 and (bit.band(string.byte(v, 2), BUILDING) ~= 0 or num(v, 11) >= asOf) then
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
      if n + 1 >= spillAt then spill(hk, tk, v .. e, maxlen, keep) end
    elseif n == 0 or num(v, #v - 7) > id then
      -- older than the newest entry: into its place, if it is not there
      local function at(k) return num(v, HEADER + 8 * k - 7) end
      local tailN, tailMax = (struct.unpack('>I4', v, 19)), num(v, 23)
      local h = {flags = string.byte(v, 2), token = string.sub(v, 3, 10)}
      local inHead = true -- its place is in the head; nil: not at all
      if tailN > 0 and id <= tailMax then
        -- Its place is in the tail: the chunks from the newest back, to the
        -- first that starts at or below it, which then takes it in place.
        inHead = nil
        local c, chunk = -1, nil
        repeat
          chunk = redis.call('LINDEX', tk, c)
          if type(chunk) ~= 'string' or #chunk == 0 then break end
          if num(chunk, 1) <= id then break end
          c = c - 1
        until -c > maxWalk
        if type(chunk) == 'string' and #chunk > 0 and num(chunk, 1) <= id then
          local m = #chunk / 8
          local k = search(m, function(x) return num(chunk, 8 * x - 7) end, id)
          if not (k <= m and num(chunk, 8 * k - 7) == id) then
            redis.call('LSET', tk, c, string.sub(chunk, 1, 8 * k - 8) .. e .. string.sub(chunk, 8 * k - 7))
            redis.call('SETRANGE', hk, 18, struct.pack('>I4', tailN + 1))
            added = added + 1
          end
        elseif -c > maxWalk then
          inHead = false -- far older than the newest: the whole set decides
        else
          -- older than every entry of the tail (ran past its oldest chunk)
          local oldest = redis.call('LINDEX', tk, 0)
          if type(oldest) ~= 'string' then
            inHead = false
          elseif not (prefix(h) and id < at(1)) then -- below every post of a prefix: left out
            redis.call('LSET', tk, 0, e .. oldest)
            redis.call('SETRANGE', hk, 18, struct.pack('>I4', tailN + 1))
            added = added + 1
          end
        end
      end
      if inHead then
        local k = search(n, at, id)
        if not (k <= n and at(k) == id) and not (k == 1 and tailN == 0 and prefix(h)) then
          local off = HEADER + 8 * (k - 1)
          redis.call('SETRANGE', hk, off, e .. string.sub(v, off + 1))
          added = added + 1
          if n + 1 >= spillAt then
            spill(hk, tk, string.sub(v, 1, off) .. e .. string.sub(v, off + 1), maxlen, keep)
          end
        end
      elseif inHead == false then
        local full = parseHead(v)
        local ids = entries(full, tk)
        if not ids then
          drop(hk, tk, nil)
        else
          local new, k
          ids, new, k = insert(ids, id)
          if new and not (k == 1 and prefix(full)) then
            store(hk, tk, full, ids, maxlen, keep)
            added = added + 1
          end
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
local ids = entries(h, tk)
if not ids then
  drop(hk, tk, fk)
  return 0
end
local bound = nil -- nil: the feed is whole
if bit.band(h.flags, WHOLE) == 0 then
  if #ids == 0 then -- cannot be: the scripts drop empty prefixes
    drop(hk, tk, fk)
    return 0
  end
  bound = ids[1]
end
local floor = tonumber(ARGV[2])
if floor > 0 then
  local kept = {}
  for _, id in ipairs(ids) do if id >= floor then kept[#kept + 1] = id end end
  ids = kept
  h.flags = bit.band(h.flags, bit.bnot(WHOLE))
  if bound == nil or bound < floor then bound = floor end
end
local added = 0
for _, id in ipairs(numbers(4)) do
  if bound == nil or id >= bound then
    local new
    ids, new = insert(ids, id)
    if new then added = added + 1 end
  end
end
store(hk, tk, h, ids, tonumber(ARGV[1]))
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
local ids = h and entries(h, tk)
if not ids or building(h) or redis.call('HEXISTS', fk, 'v') == 0 then
  drop(hk, tk, fk)
  return 0
end
if #ids > 0 and (ARGV[3] == '-' or ids[1] < tonumber(ARGV[3])) then
  return -1
end
redis.call('HDEL', fk, ARGV[1])
redis.call('HINCRBY', fk, 'v', 1)
redis.call('EXPIRE', fk, ARGV[2])
local gone = {}
for _, id in ipairs(numbers(5)) do gone[id] = true end
local removed
ids, removed = without(ids, gone)
h.asOf = math.max(h.asOf, tonumber(ARGV[4]))
store(hk, tk, h, ids, nil)
dropIfEmptyPrefix(hk, tk, h, fk)
return removed
`)

// removeScript takes posts (ARGV) out of every set among KEYS (head, tail
// pairs: a deleted post leaving its author's followers' feeds), dropping a
// set left a prefix of nothing: out of the head's bytes, or out of the
// tail's chunk that holds it (LSET). The newest entry stays in the head
// (from the tail's end when the head lost its own). It returns how many entries it removed.
var removeScript = redis.NewScript(luaCommon + `
local ids = numbers(1)
local heads = {}
for i = 1, #KEYS, 2 do heads[#heads + 1] = KEYS[i] end
local values = redis.call('MGET', unpack(heads))
local removed = 0
for j = 1, #heads do
  local h = parseHead(values[j])
  if h then
    local hk, tk = KEYS[2 * j - 1], KEYS[2 * j]
    local recent = unpackAll(h.recent)
    local n = 0
    local chunks = nil -- the tail's, read when needed
    for _, id in ipairs(ids) do
      local k = search(#recent, function(x) return recent[x] end, id)
      if recent[k] == id then
        table.remove(recent, k)
        n = n + 1
      elseif h.tailN > 0 and id <= h.tailMax then
        chunks = chunks or redis.call('LRANGE', tk, 0, -1)
        for c = #chunks, 1, -1 do
          local chunk = chunks[c]
          if #chunk > 0 and num(chunk, 1) <= id then
            local x = search(#chunk / 8, function(y) return num(chunk, 8 * y - 7) end, id)
            if x <= #chunk / 8 and num(chunk, 8 * x - 7) == id then
              chunks[c] = string.sub(chunk, 1, 8 * x - 8) .. string.sub(chunk, 8 * x + 1)
              redis.call('LSET', tk, c - 1, chunks[c])
              h.tailN = h.tailN - 1
              n = n + 1
            end
            break
          end
        end
      end
    end
    if n > 0 then
      if chunks then
        redis.call('LREM', tk, 0, '') -- chunks left empty
        local kept = {}
        for _, c in ipairs(chunks) do if #c > 0 then kept[#kept + 1] = c end end
        chunks = kept
        h.tailMax = 0
        if #chunks > 0 then h.tailMax = num(chunks[#chunks], #chunks[#chunks] - 7) end
      end
      -- the head keeps the newest entry: from the tail's end when it lost
      -- its own (a tail shorter than the header says drops the set)
      local lost = false
      while not lost and h.tailN > 0 and (#recent == 0 or recent[#recent] < h.tailMax) do
        local c = redis.call('RPOP', tk)
        if type(c) ~= 'string' or #c == 0 then
          lost = true
        else
          recent = insert(recent, num(c, #c - 7))
          h.tailN = h.tailN - 1
          h.tailMax = 0
          if #c > 8 then
            redis.call('RPUSH', tk, string.sub(c, 1, #c - 8))
            expireTail(hk, tk) -- the RPOP may have emptied the list, and its time to live went with it
          end
          if h.tailN > 0 then
            local last = redis.call('LINDEX', tk, -1)
            if type(last) ~= 'string' then lost = true else h.tailMax = num(last, #last - 7) end
          end
        end
      end
      if lost then
        drop(hk, tk, nil)
      else
        h.recent = packAll(recent)
        redis.call('SET', hk, headValue(h), 'KEEPTTL')
        dropIfEmptyPrefix(hk, tk, h, nil)
      end
      removed = removed + n
    end
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
local ids = entries(h, tk)
if not ids then
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
        gone[tonumber(string.sub(fields[j], 2))] = true
      end
    end
    ids = without(ids, gone)
  end
  redis.call('DEL', fk)
  redis.call('HSET', fk, 'v', ARGV[6])
  for i = 8, 7 + nFollowees do
    redis.call('HSET', fk, ARGV[i], 1)
  end
  redis.call('EXPIRE', fk, ARGV[2])
end
ids = union(ids, unpackAll(ARGV[#ARGV]))
h.token = NOTOKEN
h.flags = COMPLETE
if ARGV[3] == '1' then h.flags = COMPLETE + WHOLE end
h.asOf = tonumber(ARGV[7])
redis.call('EXPIRE', hk, ARGV[2])
store(hk, tk, h, ids, tonumber(ARGV[1]))
return 1
`)

// unlockScript deletes a lock only if it still holds our token.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)
