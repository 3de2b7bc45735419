-- Gives hits back to a counter under envoyproxy/ratelimit's key (floodgate's is_negative_hits,
-- which the reference does not read), never below an empty count, and renews the key's expiry
-- as every call on such a key does (src/store/redis/reference.rs).
-- KEYS[1]: the key. ARGV[1]: hits to give back. ARGV[2]: seconds until the key expires.
-- Reply: the count after.
local count = redis.call('DECRBY', KEYS[1], ARGV[1])
if count < 0 then
  redis.call('SET', KEYS[1], 0)
  count = 0
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return count
