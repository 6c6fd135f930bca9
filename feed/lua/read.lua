-- read.lua (readScript in scripts.go)
--
-- readScript reads a set (KEYS: meta, head, tail) at one moment — a read
-- made of several commands could take the meta before a spill that trims a
-- whole feed and the entries after it, and show the feed without its
-- oldest post and no PostgreSQL below it —, and reads of its tail only the
-- chunks that hold its ARGV[2] newest entries below ARGV[1] (ARGV[2] 0: the
-- whole tail): walking back from the newest chunk, usually one. It answers
-- {meta, head, whole, chunk…}: whole is 1 when the chunks (oldest first)
-- are the whole tail; {} when the meta or the head is missing or not a
-- string. The caller decodes it (decodeSet). With ARGV[3] (seconds, not
-- 0), a set that is complete and not under rebuild lives that long from
-- now: a read keeps its reader's feed. A set under rebuild keeps the short
-- life its rebuild gave it, so that one whose rebuild died goes soon.
local v = redis.call('MGET', KEYS[1], KEYS[2])
local meta, head = v[1], v[2]
if type(meta) ~= 'string' or type(head) ~= 'string' then return {} end
local keep = tonumber(ARGV[3]) or 0
if keep > 0 and #meta == 30 and string.byte(meta, 1) == 243 and string.byte(meta, 2) % 2 == 1
    and string.sub(meta, 3, 10) == string.rep('\0', 8) then
  for _, k in ipairs(KEYS) do redis.call('EXPIRE', k, keep) end
end
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
