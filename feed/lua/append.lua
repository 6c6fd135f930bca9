-- append.lua (appendScript in scripts.go), after common.lua
--
-- appendScript is the common case of a push, the first of its two steps
-- (Feeds.Push): post ARGV[1], pushed for the first time (ARGV[4] is 1, see
-- Feeds.Push), goes into every feed among KEYS — every feed's meta, then
-- every feed's head — that exists, is not under rebuild, was not rebuilt
-- or unfollowed from since the page of followers was read (its "as of" is
-- below ARGV[3]; ARGV[5] is 1 for feeds, whose readers' following this
-- decides), and whose tail's newest entry is older than the post. For each,
-- it reads the meta (one MGET for all) and appends the post to the head,
-- reading nothing of the head, and so touches two keys a feed where
-- pushScript takes four. The feeds it leaves — any other case — come back
-- for pushScript (the second list of its answer, by their places in KEYS
-- from 1). A feed whose head was lost (an APPEND to a missing head makes
-- one without the layout's first byte) is dropped then and there, so that
-- no step after this one is needed to take the new key away. The feeds
-- whose head it filled to ARGV[2] entries come back for spillScript (the
-- third list). Its answer's first list is the places of the feeds that
-- gained the post, its fourth those of the feeds that are not there.
--
-- KEYS here means the call's keys: on a cluster primary they come after
-- the arguments (see callKeys).
local id = tonumber(ARGV[1])
local e = pack(id)
local spillAt, asOf = tonumber(ARGV[2]), tonumber(ARGV[3])
local first, feeds = ARGV[4] == '1', ARGV[5] == '1'
local keys, manySlots = callKeys(5)
local n = setsOf(keys, 2)
local values = metasOf(keys, n, manySlots)
local held, full, spills, missing = {}, {}, {}, {}
for j = 1, n do
  local v = values[j]
  if type(v) == 'string' and #v == HEADER then
    local magic, flags, metaAsOf, tailN, tailMax = struct.unpack(META, v)
    if magic ~= MAGIC then
      -- not a set of this layout: nothing to push into
    elseif first and id > tailMax and bit.band(flags, BUILDING) == 0 and not (feeds and metaAsOf >= asOf)
        and (tailN > 0 or bit.band(flags, WHOLE + COMPLETE) ~= COMPLETE) then
      local length = redis.call('APPEND', keys[n + j], e)
      if (length - 1) % 8 ~= 0 then
        -- The head was lost, and the APPEND made a new one (no 0xF2, no time
        -- to live): the set goes at once, meta and head (its tail expires
        -- with the time to live it has, and the next rebuild deletes it).
        redis.call('DEL', keys[j], keys[n + j])
      else
        held[#held + 1] = j
        if (length - 1) / 8 >= spillAt then spills[#spills + 1] = j end
      end
    else
      full[#full + 1] = j
    end
  else
    missing[#missing + 1] = j
  end
end
return {held, full, spills, missing}
