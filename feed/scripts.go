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
// to 2^53, far above any post id a sequence hands out). What a script reads
// costs it about 1.5 ns a byte (a reply turned into Lua strings), and large
// strings are slow to make (about 20 µs for 6 KB), and so are many small
// ones (string.format of 50 ids, 27 µs), so the common path does neither: a
// push reads the sets' metas alone (30 bytes each, one MGET for a page) and
// appends its entry to each head, in whatever order posts come (headIDs
// sorts them when a script needs them), and a spill pushes the head's older
// entries onto the tail as one chunk and trims the tail's oldest chunk.
// Every script reads metas and heads with MGET, which answers false for a
// key of another type — a sorted set left by an older version — so such a
// key reads as missing and is overwritten.

// luaCommon is put before every script that changes a set.
const luaCommon = `
local MAGIC, HEADER = 243, 30
-- a meta's magic, flags, "as of", tail count and tail's newest (the token skipped)
local META = '>BBxxxxxxxxI8I4I8'
local HEADSTART = string.char(242) -- a head's first byte
local COMPLETE, WHOLE, BUILDING = 1, 2, 4
local NOTOKEN = string.rep('\0', 8)

local function num(s, pos) return (struct.unpack('>I8', s, pos)) end
local function pack(id) return struct.pack('>I8', id) end

-- A set's meta (m) and head (hv), parsed; nil when either key is missing
-- or holds anything else.
local function parseSet(m, hv)
  if type(m) ~= 'string' or #m ~= HEADER or string.byte(m, 1) ~= MAGIC
      or type(hv) ~= 'string' or string.sub(hv, 1, 1) ~= HEADSTART or (#hv - 1) % 8 ~= 0 then
    return nil
  end
  return {flags = string.byte(m, 2), token = string.sub(m, 3, 10), asOf = num(m, 11),
          tailN = (struct.unpack('>I4', m, 19)), tailMax = num(m, 23), recent = string.sub(hv, 2)}
end

local function metaValue(h)
  return string.char(MAGIC, h.flags) .. h.token .. pack(h.asOf) .. struct.pack('>I4', h.tailN) .. pack(h.tailMax)
end

local function getSet(mk, hk)
  local v = redis.call('MGET', mk, hk)
  return parseSet(v[1], v[2])
end

-- Writes a set's meta and head back; both keep their time to live.
local function putSet(mk, hk, h)
  redis.call('SET', mk, metaValue(h), 'KEEPTTL')
  redis.call('SET', hk, HEADSTART .. h.recent, 'KEEPTTL')
end

local function building(h) return h.token ~= NOTOKEN end

-- A complete set that is not whole: its lowest entry is its bound.
local function prefix(h) return not building(h) and bit.band(h.flags, WHOLE + COMPLETE) == COMPLETE end

-- struct formats of n ids, made once each: one struct call packs or
-- unpacks a run of ids, where a call an id costs ten times more.
local formats = {}
local function idsFormat(n)
  local f = formats[n]
  if not f then
    f = '>' .. string.rep('I8', n)
    formats[n] = f
  end
  return f
end
-- ids a struct call takes at most (its values go on Lua's C stack)
local RUN = 1000

local function unpackAll(p)
  local ids, n = {}, #p / 8
  for from = 1, n, RUN do
    local k = math.min(RUN, n - from + 1)
    local run = {struct.unpack(idsFormat(k), p, 8 * from - 7)}
    for i = 1, k do ids[from + i - 1] = run[i] end
  end
  return ids
end

local function packAll(ids, from, to)
  from, to = from or 1, to or #ids
  local parts = {}
  for i = from, to, RUN do
    local j = math.min(i + RUN - 1, to)
    parts[#parts + 1] = struct.pack(idsFormat(j - i + 1), unpack(ids, i, j))
  end
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

-- The head's entries, ascending without repeats, and whether its bytes
-- already held them so (then a spill can cut them as they are). A push
-- appends its post without reading the head (see pushScript), so posts that
-- came out of order, or a post pushed twice, sit in the head as they came
-- until a script that rewrites the head puts them in order.
local function headIDs(h)
  local ids = unpackAll(h.recent)
  for i = 2, #ids do
    if ids[i] <= ids[i - 1] then
      table.sort(ids)
      local out = {}
      for _, id in ipairs(ids) do
        if id ~= out[#out] then out[#out + 1] = id end
      end
      return out, false
    end
  end
  return ids, true
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
  return union(tail, (headIDs(h)))
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

-- Head and tail live as long as the meta.
local function expireWith(mk, k)
  local ttl = redis.call('PTTL', mk)
  if ttl > 0 then redis.call('PEXPIRE', k, ttl) end
end

-- Writes a set's entries (ids, ascending) back: a complete set trimmed to
-- maxlen (nil: no trim), and a whole one that lost entries so is whole no
-- more; the newest keep entries (at least one) in the head, the rest in
-- the tail, which expires with the meta. Meta and head keep their time to
-- live.
local function store(mk, hk, tk, h, ids, maxlen, keep)
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
  putSet(mk, hk, h)
  redis.call('DEL', tk)
  if h.tailN > 0 then
    rpushAll(tk, ids, first, split)
    expireWith(mk, tk)
  end
end

-- A complete set that is not whole and holds no post any more is a prefix
-- of nothing: it knows no bound, so it goes (with the user's following
-- hash, fk, when given), and the next read rebuilds it.
local function dropIfEmptyPrefix(mk, hk, tk, h, fk)
  if prefix(h) and #h.recent == 0 and h.tailN == 0 then
    redis.call('DEL', mk, hk, tk)
    if fk then redis.call('DEL', fk) end
    return true
  end
  return false
end

local function drop(mk, hk, tk, fk)
  redis.call('DEL', mk, hk, tk)
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

-- Moves the older entries of a head that reached spillAt entries to the
-- tail as one chunk, keeping its newest keep in order, and trims a complete
-- set to maxlen. Every head entry is newer than the tail's newest (a push
-- of a post older than that writes it into the tail), so the chunk goes at
-- the tail's end. A head that only repeats made long is put in order
-- again. A tail that is not as long as the header says (lost apart from the
-- meta) drops the set, which the next read rebuilds.
local function spill(mk, hk, tk, maxlen, keep)
  local h = getSet(mk, hk)
  if not h then return end
  local ids, inOrder = headIDs(h)
  local moveN = #ids - keep
  if moveN <= 0 then
    if not inOrder then
      h.recent = packAll(ids)
      redis.call('SET', hk, HEADSTART .. h.recent, 'KEEPTTL')
    end
    return
  end
  local length = redis.call('LLEN', tk)
  if (h.tailN > 0) ~= (length > 0) or ids[1] <= h.tailMax then
    drop(mk, hk, tk, nil)
    return
  end
  local moved, kept
  if inOrder then -- cut the bytes as they are: no string an entry
    moved, kept = string.sub(h.recent, 1, 8 * moveN), string.sub(h.recent, 8 * moveN + 1)
  else
    moved, kept = packAll(ids, 1, moveN), packAll(ids, moveN + 1, #ids)
  end
  redis.call('RPUSH', tk, moved)
  if length == 0 then expireWith(mk, tk) end
  h.tailN = h.tailN + moveN
  h.tailMax = ids[moveN]
  if not trimTail(tk, h, maxlen, keep) then
    drop(mk, hk, tk, nil)
    return
  end
  h.recent = kept
  putSet(mk, hk, h)
end
`

// appendScript is the common case of a push, the first of its two steps
// (Feeds.Push): post ARGV[1], pushed for the first time (ARGV[4] is 1, see
// Feeds.Push), goes into every feed among KEYS — every feed's meta, then
// every feed's head — that exists, is not under rebuild, was not rebuilt
// or unfollowed from since the page of followers was read (its "as of" is
// below ARGV[3]; ARGV[5] is 1 for feeds, whose readers' following this
// decides), and whose tail's newest entry is older than the post. For each,
// it reads the meta (one MGET for all) and appends the post to the head,
// reading nothing of the head, and so touches two keys a feed where
// pushScript takes four. The feeds it leaves — any other case — come back
// for pushScript (the second list of its answer, by their places in KEYS
// from 1). A feed whose head was lost (an APPEND to a missing head makes
// one without the layout's first byte) is dropped then and there, so that
// no step after this one is needed to take the new key away. The feeds
// whose head it filled to ARGV[2] entries come back for spillScript (the
// third list). Its answer's first element is how
// many feeds gained the post.
var appendScript = redis.NewScript(luaCommon + `
local id = tonumber(ARGV[1])
local e = pack(id)
local spillAt, asOf = tonumber(ARGV[2]), tonumber(ARGV[3])
local first, feeds = ARGV[4] == '1', ARGV[5] == '1'
local n = #KEYS / 2
local values = redis.call('MGET', unpack(KEYS, 1, n))
local added, full, spills = 0, {}, {}
for j = 1, n do
  local v = values[j]
  if type(v) == 'string' and #v == HEADER then
    local magic, flags, metaAsOf, tailN, tailMax = struct.unpack(META, v)
    if magic ~= MAGIC then
      -- not a set of this layout: nothing to push into
    elseif first and id > tailMax and bit.band(flags, BUILDING) == 0 and not (feeds and metaAsOf >= asOf)
        and (tailN > 0 or bit.band(flags, WHOLE + COMPLETE) ~= COMPLETE) then
      local length = redis.call('APPEND', KEYS[n + j], e)
      if (length - 1) % 8 ~= 0 then
        -- The head was lost, and the APPEND made a new one (no 0xF2, no time
        -- to live): the set goes at once, meta and head (its tail expires
        -- with the time to live it has, and the next rebuild deletes it).
        redis.call('DEL', KEYS[j], KEYS[n + j])
      else
        added = added + 1
        if (length - 1) / 8 >= spillAt then spills[#spills + 1] = j end
      end
    else
      full[#full + 1] = j
    end
  end
end
return {added, full, spills}
`)

// spillScript spills the heads among KEYS (every set's meta, then every
// head, then every tail) that hold ARGV[2] entries or more (see spill),
// trimming complete sets to ARGV[1]: the second step of a push whose
// first (appendScript) filled them.
var spillScript = redis.NewScript(luaCommon + `
local maxlen, spillAt = tonumber(ARGV[1]), tonumber(ARGV[2])
local keep = math.max(math.floor(spillAt / 4), 1)
local n = #KEYS / 3
for j = 1, n do
  local mk, hk, tk = KEYS[j], KEYS[n + j], KEYS[2 * n + j]
  if redis.call('STRLEN', hk) >= 1 + 8 * spillAt then spill(mk, hk, tk, maxlen, keep) end
end
return 0
`)

// pushScript adds one post (ARGV[1]) by ARGV[4] to every set among KEYS
// that exists. The common case — the post is newer than everything in the
// tail, and the push is a first one (ARGV[7] is 1: see Feeds.Push) — reads
// the set's meta (in one MGET for all) and appends the post to the head
// (APPEND), whatever the head holds: reading the head's entries would cost
// more than the rest of the push together. So the head holds its entries in the
// order they came, which, with fan-outs side by side finishing in any
// order, is not always theirs (headIDs puts them in order when a script
// needs them; reads do the same). A push that may repeat an earlier one
// reads the head and adds the post only if it is not there. A post older
// than the tail's newest is written into the tail's chunk that covers it
// (LSET), found by walking back from the newest chunk. Once the head holds
// ARGV[3] entries, the older ones move to the tail in order, keeping
// ARGV[3]/4, and a complete set is trimmed back to max_len (ARGV[2]) then:
// the cost of a trim is paid once per 3/4 ARGV[3] pushes, and reads, which
// take the newest, never see the difference. A set under rebuild is not
// trimmed (the rebuild's finish trims it, after merging what it read: a
// post trimmed before would be missing above the bound). A post older than
// every post of a complete prefix is left out: it would leave a gap above
// it (reads find it in PostgreSQL); that includes a prefix of nothing.
//
// KEYS name each set's meta, head and tail (encoding.go), and for feeds
// (ARGV[4] not empty) the reader's following hash too, by kind: every meta,
// then every head, and so on (runOverKeys lays them out so: the metas are
// read in one MGET of KEYS[1..n]), and a post goes only into the
// feed of a reader who follows its author. ARGV[6] is the PostgreSQL write
// position read before the page of followers: a feed whose last rebuild or
// unfollow happened at or after it (the meta's "as of") may have lost the
// author since the page was read, and its following hash decides; every
// other feed's reader followed the author when the page was read and has
// not unfollowed anyone since, so no lookup is needed. A feed under rebuild
// always asks the hash; when the hash is not complete (under rebuild, or
// lost) the feed takes the post and the hash records its author (field
// "p<post id>", kept ARGV[5] seconds), so that the rebuild's finish removes
// it if the reader does not follow the author.
//
// One call serves a page of followers, so the cost of running a script is
// paid once per page instead of once per follower; in a Redis Cluster,
// where a script may only touch keys of one slot, it is called with one
// feed at a time. It returns how many sets gained the post (a first push
// counts the feeds it appended to).
var pushScript = redis.NewScript(luaCommon + `
local id = tonumber(ARGV[1])
local e = pack(id)
local maxlen, spillAt = tonumber(ARGV[2]), tonumber(ARGV[3])
local keep = math.max(math.floor(spillAt / 4), 1)
-- how many of the tail's chunks a late push walks back (each an LINDEX)
-- before it rewrites the set instead
local maxWalk = 16
local author = ARGV[4]
local asOf = tonumber(ARGV[6])
local first = ARGV[7] == '1'
local n = #KEYS / 3 -- sets
if author ~= '' then n = #KEYS / 4 end
local values = redis.call('MGET', unpack(KEYS, 1, n)) -- the metas
local added = 0
-- appends the post to the head, and spills a head that is full now
local function append(mk, hk, tk)
  local length = redis.call('APPEND', hk, e)
  if (length - 1) % 8 ~= 0 then
    drop(mk, hk, tk, nil) -- the head was lost: the APPEND made a new one
    return
  end
  added = added + 1
  if (length - 1) / 8 >= spillAt then spill(mk, hk, tk, maxlen, keep) end
end
for j = 1, n do
  local v = values[j]
  local magic, flags, metaAsOf, tailN, tailMax
  if type(v) == 'string' and #v == HEADER then
    magic, flags, metaAsOf, tailN, tailMax = struct.unpack(META, v)
  end
  if magic == MAGIC then
    local mk, hk, tk, fk = KEYS[j], KEYS[n + j], KEYS[2 * n + j], KEYS[3 * n + j]
    local ok = true
    if author ~= '' and (bit.band(flags, BUILDING) ~= 0 or metaAsOf >= asOf) then
      if redis.call('HEXISTS', fk, author) == 0 then
        if redis.call('HEXISTS', fk, 'v') == 1 then
          ok = false -- the reader does not follow the author
        else
          redis.call('HSET', fk, 'p' .. ARGV[1], author)
          redis.call('EXPIRE', fk, ARGV[5])
        end
      end
    end
    -- a complete prefix: its bound is its lowest entry, in the tail if it
    -- has one (below every head entry), else in the head
    local isPrefix = bit.band(flags, BUILDING + WHOLE + COMPLETE) == COMPLETE
    if not ok then
      -- not for this reader
    elseif id > tailMax and first and (tailN > 0 or not isPrefix) then
      append(mk, hk, tk)
    elseif id > tailMax then
      -- into the head, unless it is there or below a prefix's bound
      local h = getSet(mk, hk)
      if not h then
        drop(mk, hk, tk, nil)
      else
        local ids = headIDs(h)
        local k = search(#ids, function(x) return ids[x] end, id)
        if ids[k] ~= id and not (k == 1 and tailN == 0 and prefix(h)) then append(mk, hk, tk) end
      end
    else
      -- Its place is in the tail: the chunks from the newest back, to the
      -- first that starts at or below it, which then takes it in place.
      local h = {flags = flags, token = string.sub(v, 3, 10)}
      local rewrite = false
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
          redis.call('SETRANGE', mk, 18, struct.pack('>I4', tailN + 1))
          added = added + 1
        end
      elseif -c > maxWalk then
        rewrite = true -- far older than the newest: the whole set decides
      else
        -- older than every entry of the tail (ran past its oldest chunk):
        -- below a prefix's bound, where it is left out
        local oldest = redis.call('LINDEX', tk, 0)
        if type(oldest) ~= 'string' then
          rewrite = true
        elseif not prefix(h) then
          redis.call('LSET', tk, 0, e .. oldest)
          redis.call('SETRANGE', mk, 18, struct.pack('>I4', tailN + 1))
          added = added + 1
        end
      end
      if rewrite then
        local full = getSet(mk, hk)
        local ids = full and entries(full, tk)
        if not ids then
          drop(mk, hk, tk, nil)
        else
          local new, k
          ids, new, k = insert(ids, id)
          if new and not (k == 1 and prefix(full)) then
            store(mk, hk, tk, full, ids, maxlen, keep)
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
// hash (KEYS[4]), kept for ARGV[2] seconds more, if their feed (KEYS[1..3],
// meta, head and tail) is complete: from then on pushes of the followee's
// posts land in the feed. A feed under rebuild, or without its following
// hash, is dropped instead: the next read rebuilds it with the new follow.
// It returns 1 when the feed is there to merge into, 0 when there is none
// (any more).
var followScript = redis.NewScript(luaCommon + `
local mk, hk, tk, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = getSet(mk, hk)
if not h or building(h) or redis.call('HEXISTS', fk, 'v') == 0 then
  drop(mk, hk, tk, fk)
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
// following hash, KEYS[4], says). When ARGV[2] (the floor) is not 0 the
// merged posts may not be all the followee's posts down to the feed's
// bound, so entries older than the floor are dropped first and the floor is
// the bound from then on (with no posts to merge, the floor is above every
// post of the followee). Posts below the bound are left out. It returns how
// many posts it added.
var mergeScript = redis.NewScript(luaCommon + `
local mk, hk, tk, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = getSet(mk, hk)
if not h or building(h) or redis.call('HEXISTS', fk, 'v') == 0
    or redis.call('HEXISTS', fk, ARGV[3]) == 0 then
  return 0
end
local ids = entries(h, tk)
if not ids then
  drop(mk, hk, tk, fk)
  return 0
end
local bound = nil -- nil: the feed is whole
if bit.band(h.flags, WHOLE) == 0 then
  if #ids == 0 then -- cannot be: the scripts drop empty prefixes
    drop(mk, hk, tk, fk)
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
store(mk, hk, tk, h, ids, tonumber(ARGV[1]))
dropIfEmptyPrefix(mk, hk, tk, h, fk)
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
local mk, hk, tk, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = getSet(mk, hk)
local ids = h and entries(h, tk)
if not ids or building(h) or redis.call('HEXISTS', fk, 'v') == 0 then
  drop(mk, hk, tk, fk)
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
store(mk, hk, tk, h, ids, nil)
dropIfEmptyPrefix(mk, hk, tk, h, fk)
return removed
`)

// removeScript takes posts (ARGV) out of every set among KEYS (every set's
// meta, then every head, then every tail, as runOverKeys lays them out: a
// deleted post leaving its author's followers' feeds), dropping a
// set left a prefix of nothing: out of the head's bytes, or out of the
// tail's chunk that holds it (LSET). The newest entry stays in the head
// (from the tail's end when the head lost its own). It returns how many entries it removed.
var removeScript = redis.NewScript(luaCommon + `
local ids = numbers(1)
local n = #KEYS / 3 -- sets
local values = redis.call('MGET', unpack(KEYS, 1, 2 * n)) -- their metas and heads
local removed = 0
for j = 1, n do
  local h = parseSet(values[j], values[n + j])
  if h then
    local mk, hk, tk = KEYS[j], KEYS[n + j], KEYS[2 * n + j]
    local recent = headIDs(h)
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
            expireWith(mk, tk) -- the RPOP may have emptied the list, and its time to live went with it
          end
          if h.tailN > 0 then
            local last = redis.call('LINDEX', tk, -1)
            if type(last) ~= 'string' then lost = true else h.tailMax = num(last, #last - 7) end
          end
        end
      end
      if lost then
        drop(mk, hk, tk, nil)
      else
        h.recent = packAll(recent)
        putSet(mk, hk, h)
        dropIfEmptyPrefix(mk, hk, tk, h, nil)
      end
      removed = removed + n
    end
  end
end
return removed
`)

// finishRebuildScript completes a rebuild of a set (KEYS[1..3], meta, head
// and tail) if its token (ARGV[4]) is still in the meta — nobody dropped the
// set meanwhile, as follows and unfollows do, and no later rebuild took
// over: it adds the posts (the last argument: ids packed as the set stores
// them, ascending) to those pushed meanwhile, marks the set complete — and
// whole when ARGV[3] is 1: the posts are the whole history —, trims it to
// ARGV[1], sets its "as of" to ARGV[7] (the PostgreSQL write position read
// after the rebuild read PostgreSQL) and lets it expire after ARGV[2]
// seconds without reads. For a feed, KEYS[4] is the reader's following
// hash: the posts pushed meanwhile whose author it recorded ("p<id>") go
// unless the reader follows the author, and it is written anew with version
// ARGV[6] (random, so that no version of a hash is ever seen twice) and the
// ARGV[5] followee ids that follow. It returns 1 when the set is complete
// now, 0 when the rebuild gave up.
var finishRebuildScript = redis.NewScript(luaCommon + `
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
redis.call('EXPIRE', mk, ARGV[2])
store(mk, hk, tk, h, ids, tonumber(ARGV[1]))
expireWith(mk, hk)
return 1
`)

// readScript reads a set (KEYS: meta, head, tail) at one moment — a read
// made of several commands could take the meta before a spill that trims a
// whole feed and the entries after it, and show the feed without its
// oldest post and no PostgreSQL below it —, and reads of its tail only the
// chunks that hold its ARGV[2] newest entries below ARGV[1] (ARGV[2] 0: the
// whole tail): walking back from the newest chunk, usually one. It answers
// {meta, head, whole, chunk…}: whole is 1 when the chunks (oldest first)
// are the whole tail; {} when the meta or the head is missing or not a
// string. The caller decodes it (decodeSet).
var readScript = redis.NewScript(`
local v = redis.call('MGET', KEYS[1], KEYS[2])
local meta, head = v[1], v[2]
if type(meta) ~= 'string' or type(head) ~= 'string' then return {} end
if #meta ~= 30 or struct.unpack('>I4', meta, 19) == 0 then return {meta, head, 1} end
local before, n = tonumber(ARGV[1]), tonumber(ARGV[2])
if n == 0 then
  local all = redis.pcall('LRANGE', KEYS[3], 0, -1)
  local out = {meta, head, 1}
  if type(all) == 'table' and not all.err then
    for _, c in ipairs(all) do out[#out + 1] = c end
  end
  return out
end
local chunks, got, i, whole = {}, 0, -1, 0
while true do
  local chunk = redis.pcall('LINDEX', KEYS[3], i)
  if type(chunk) ~= 'string' then
    whole = 1 -- past the tail's oldest chunk (or no tail at all)
    break
  end
  chunks[#chunks + 1] = chunk
  local m = #chunk / 8
  if m >= 1 and struct.unpack('>I8', chunk, 1) < before then
    -- how many of the chunk's entries are below before
    local lo, hi = 1, m + 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if struct.unpack('>I8', chunk, 8 * mid - 7) < before then lo = mid + 1 else hi = mid end
    end
    got = got + lo - 1
  end
  if got >= n then break end
  i = i - 1
end
local out = {meta, head, whole}
for k = #chunks, 1, -1 do out[#out + 1] = chunks[k] end
return out
`)

// unlockScript deletes a lock only if it still holds our token.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)
