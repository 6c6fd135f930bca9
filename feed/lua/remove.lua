-- remove.lua (removeScript in scripts.go), after common.lua
--
-- removeScript takes posts (ARGV) out of every set among KEYS (every set's
-- meta, then every head, then every tail, as runOverKeys lays them out: a
-- deleted post leaving its author's followers' feeds), dropping a
-- set left a prefix of nothing: out of the head's bytes, or out of the
-- tail's chunk that holds it (LSET). The newest entry stays in the head
-- (from the tail's end when the head lost its own). It returns how many entries it removed.
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
