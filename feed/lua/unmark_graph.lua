-- unmark_graph.lua (unmarkGraphScript in scripts.go)
--
-- unmarkGraphScript ends one graph change's mark (KEYS[1], a count of the
-- reader's graph changes in flight; see Feeds.MarkGraphChange): it counts
-- it down, and deletes it at 0 (or below: it expired meanwhile and the
-- count started again from nothing).
local n = redis.call('DECR', KEYS[1])
if n <= 0 then redis.call('DEL', KEYS[1]) end
return n
