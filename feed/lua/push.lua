-- push.lua (pushScript in scripts.go), after common.lua
--
-- pushScript adds one post (ARGV[1]) by ARGV[4] to every set among KEYS
-- that exists. The common case — the post is newer than everything in the
-- tail, and the push is a first one (ARGV[7] is 1: see Feeds.Push) — reads
-- the set's meta (in one MGET for all) and appends the post to the head
-- (APPEND), whatever the head holds: reading the head's entries would cost
-- more than the rest of the push together. So the head holds its entries in the
-- order they came, which, with fan-outs side by side finishing in any
-- order, is not always theirs (headIDs puts them in order when a script
-- needs them; reads do the same). A push that may repeat an earlier one
-- reads the head and adds the post only if it is not there. A post older
-- than the tail's newest is written into the tail's chunk that covers it
-- (LSET), found by walking back from the newest chunk. Once the head holds
-- ARGV[3] entries, the older ones move to the tail in order, keeping
-- ARGV[3]/4, and a complete set is trimmed back to max_len (ARGV[2]) then:
-- the cost of a trim is paid once per 3/4 ARGV[3] pushes, and reads, which
-- take the newest, never see the difference. A set under rebuild is not
-- trimmed (the rebuild's finish trims it, after merging what it read: a
-- post trimmed before would be missing above the bound). A post older than
-- every post of a complete prefix is left out: it would leave a gap above
-- it (reads find it in PostgreSQL); that includes a prefix of nothing.
--
-- KEYS name each set's meta, head and tail (encoding.go), and for feeds
-- (ARGV[4] not empty) the reader's following hash too, by kind: every meta,
-- then every head, and so on (runOverKeys lays them out so: the metas are
-- read in one MGET of KEYS[1..n]), and a post goes only into the
-- feed of a reader who follows its author. ARGV[6] is the PostgreSQL write
-- position read before the page of followers: a feed whose last rebuild or
-- unfollow happened at or after it (the meta's "as of") may have lost the
-- author since the page was read, and its following hash decides; every
-- other feed's reader followed the author when the page was read and has
-- not unfollowed anyone since, so no lookup is needed. A feed under rebuild
-- always asks the hash; when the hash is not complete (under rebuild, or
-- lost) the feed takes the post and the hash records its author (field
-- "p<post id>", kept ARGV[5] seconds), so that the rebuild's finish removes
-- it if the reader does not follow the author.
--
-- One call serves a page of followers, so the cost of running a script is
-- paid once per page instead of once per follower; on a Redis Cluster, once
-- per primary and page. (KEYS here means the call's keys: on a cluster
-- primary they come after the arguments, see callKeys.) It returns how
-- many sets gained the post (a first push counts the feeds it appended
-- to) and the places in KEYS (from 1) of the
-- sets that hold it now — those that gained it or had it already: a live
-- stream shows the post to their readers, and to no one else — and of
-- those that are not there.
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
local keys, manySlots = callKeys(7)
local n = setsOf(keys, author ~= '' and 4 or 3)
local values = metasOf(keys, n, manySlots)
local added, held, missing = 0, {}, {}
-- appends the post to the head, and spills a head that is full now; true
-- when the set holds the post
local function append(mk, hk, tk)
  local length = redis.call('APPEND', hk, e)
  if (length - 1) % 8 ~= 0 then
    drop(mk, hk, tk, nil) -- the head was lost: the APPEND made a new one
    return false
  end
  added = added + 1
  if (length - 1) / 8 >= spillAt then spill(mk, hk, tk, maxlen, keep) end
  return true
end
for j = 1, n do
  local holds = false
  local v = values[j]
  local magic, flags, metaAsOf, tailN, tailMax
  if type(v) == 'string' and #v == HEADER then
    magic, flags, metaAsOf, tailN, tailMax = struct.unpack(META, v)
  end
  if magic == MAGIC then
    local mk, hk, tk, fk = keys[j], keys[n + j], keys[2 * n + j], keys[3 * n + j]
    local ok = true
    if author ~= '' and (bit.band(flags, BUILDING) ~= 0 or metaAsOf >= asOf) then
      if (tonumber(redis.call('HGET', fk, author)) or 0) <= 0 then
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
      holds = append(mk, hk, tk)
    elseif id > tailMax then
      -- into the head, unless it is there or below a prefix's bound
      local h = getSet(mk, hk)
      if not h then
        drop(mk, hk, tk, nil)
      else
        local ids = headIDs(h)
        local k = search(#ids, function(x) return ids[x] end, id)
        if ids[k] == id then
          holds = true
        elseif not (k == 1 and tailN == 0 and prefix(h)) then
          holds = append(mk, hk, tk)
        end
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
        holds = true
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
          holds = true
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
          if not new then
            holds = true
          elseif not (k == 1 and prefix(full)) then
            store(mk, hk, tk, full, ids, maxlen, keep)
            added = added + 1
            holds = true
          end
        end
      end
    end
  end
  if holds then held[#held + 1] = j elseif magic ~= MAGIC then missing[#missing + 1] = j end
end
return {added, held, missing}
