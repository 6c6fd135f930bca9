-- merge.lua (mergeScript in scripts.go), after common.lua
--
-- mergeScript merges posts (ARGV[5..]) of a followee (ARGV[3]) into the
-- reader's feed after followScript applied the follow of version ARGV[4],
-- then trims it to ARGV[1] entries; it does nothing if the feed was dropped
-- or another state of the follow was applied since (the following hash,
-- KEYS[4], says: a newer follow merges for itself, and after an unfollow
-- the posts must stay out). It clears the mark followScript left
-- (markMerge). When ARGV[2] (the floor) is not 0 the
-- merged posts may not be all the followee's posts down to the feed's
-- bound, so entries older than the floor are dropped first and the floor is
-- the bound from then on (with no posts to merge, the floor is above every
-- post of the followee). Posts below the bound are left out. It returns how
-- many posts it added.
local mk, hk, tk, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = getSet(mk, hk)
if not h or building(h) or redis.call('HEXISTS', fk, 'v') == 0
    or tonumber(redis.call('HGET', fk, ARGV[3])) ~= tonumber(ARGV[4]) + 1 then
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
for _, id in ipairs(numbers(5)) do
  if bound == nil or id >= bound then
    local new
    ids, new = insert(ids, id)
    if new then added = added + 1 end
  end
end
store(mk, hk, tk, h, ids, tonumber(ARGV[1]))
unmarkMerge(fk, ARGV[3], tonumber(ARGV[4]))
dropIfEmptyPrefix(mk, hk, tk, h, fk)
return added
