-- common.lua: the prelude put before every script that changes a set
-- (loaded by scripts.go; never run alone).
--
-- The scripts keep every feed and timeline a complete newest prefix of the
-- truth, or its whole history, in the layout of encoding.go. Each asks the
-- same questions of the set it changes: is it missing, under rebuild,
-- whole, a prefix (and then what is its bound: its lowest entry), and does
-- the change leave it a prefix of nothing.
--
-- Entries are 8-byte big-endian ids, compared after struct.unpack (Lua's
-- string comparison follows the server's locale, and its numbers are exact
-- to 2^53, far above any post id a sequence hands out). What a script reads
-- costs it about 1.5 ns a byte (a reply turned into Lua strings), and large
-- strings are slow to make (about 20 µs for 6 KB), and so are many small
-- ones (string.format of 50 ids, 27 µs), so the common path does neither: a
-- push reads the sets' metas alone (30 bytes each, one MGET for a page) and
-- appends its entry to each head, in whatever order posts come (headIDs
-- sorts them when a script needs them), and a spill pushes the head's older
-- entries onto the tail as one chunk and trims the tail's oldest chunk.
-- Every script reads metas and heads with MGET, which answers false for a
-- key of another type — a sorted set left by an older version — so such a
-- key reads as missing and is overwritten.
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

-- The keys of a call, and whether they span slots. A call on one Redis, or
-- on one slot of a Redis Cluster, declares them (KEYS). A call on a
-- cluster primary for the sets of many slots cannot — a call's KEYS must
-- share one slot — and passes them in ARGV after the script's own nargs
-- arguments instead. Redis lets a script without flags touch undeclared
-- keys of every slot its node serves — a script without a shebang line
-- does (with one, it would need flags=allow-cross-slot-keys); a key of a
-- slot it does not serve (moved, or moving) fails the call there, and the
-- caller runs the page again set by set (see Feeds.Push).
local function callKeys(nargs)
  if #KEYS > 0 then return KEYS, false end
  local ks = {}
  for i = nargs + 1, #ARGV do ks[#ks + 1] = ARGV[i] end
  return ks, true
end

-- How many sets the keys ks name, per keys each; an error if they do not
-- divide (a caller and a script that disagree on the arguments would
-- otherwise take arguments for keys).
local function setsOf(ks, per)
  if #ks == 0 or #ks % per ~= 0 then
    error('expected the keys of sets of ' .. per .. ', got ' .. #ks .. ' keys')
  end
  return #ks / per
end

-- The values of ks[1..n] (the metas of n sets): one MGET, or one MGET a
-- key when they span slots, as no command may. (MGET, unlike GET, answers
-- false for a key of another type.)
local function metasOf(ks, n, manySlots)
  if not manySlots then return redis.call('MGET', unpack(ks, 1, n)) end
  local values = {}
  for j = 1, n do values[j] = redis.call('MGET', ks[j])[1] end
  return values
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

-- A reader's following hash (fk) holds, per followee, the follow state it
-- last applied and the version of the reader's graph it was read at: the
-- version + 1 while followed, minus that once unfollowed (+1: a graph that
-- never changed is at version 0, and a followee's field is never 0, so a
-- positive field always means "followed"). "g" is the version a rebuild
-- wrote the whole hash at. A follow state of version v is stale when the
-- hash holds the followee's of a later version, or was rebuilt at v or
-- later: a newer state is applied already, and applying an older one would
-- undo it. It returns the state the hash holds (1 followed, -1 not, 0 no
-- field), its version, and whether v is stale.
local function followField(fk, followee, v)
  local f = redis.call('HMGET', fk, followee, 'g')
  local cur, base = tonumber(f[1]) or 0, tonumber(f[2]) or 0
  local state, ver = 0, 0
  if cur > 0 then state, ver = 1, cur - 1 elseif cur < 0 then state, ver = -1, -cur - 1 end
  return state, ver, v <= base or ver > v
end

-- A follow is applied in two steps, followScript and mergeScript, with the
-- followee's recent posts read from PostgreSQL between them; meanwhile the
-- feed may already hold the followee's newest posts (pushed) and not yet the
-- older ones. followScript marks the merge pending in the following hash
-- ("m<followee>": the version of the follow; "mg": how many are pending),
-- and reads take a page from PostgreSQL while one is, so that no read shows
-- a follow half applied. mergeScript clears its own mark; an unfollow of
-- the followee clears any; a rebuild writes the hash anew.
local function markMerge(fk, followee, v)
  if redis.call('HSETNX', fk, 'm' .. followee, v) == 1 then
    redis.call('HINCRBY', fk, 'mg', 1)
  else
    redis.call('HSET', fk, 'm' .. followee, v)
  end
end

-- unmarkMerge clears the mark of followee's merge, only the one of version
-- v when v is given.
local function unmarkMerge(fk, followee, v)
  local field = 'm' .. followee
  if v and tonumber(redis.call('HGET', fk, field)) ~= v then return end
  if redis.call('HDEL', fk, field) == 1 then redis.call('HINCRBY', fk, 'mg', -1) end
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
