-- unlock.lua (unlockScript in scripts.go)
--
-- unlockScript deletes a lock only if it still holds our token.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
