-- Lists the live Limitador-format counters among KEYS, one page of a SCAN of a namespace's keys
-- (held_window_listing.rs), for Limitador's GET /counters/{namespace}. A counter is live while
-- its window runs (e > now), as held_window.lua and src/store/held_windows/memory.rs read it; a
-- closed one, or a key that expired between the SCAN and this call, is left out.
--
-- KEYS: the keys, all of one namespace (one hash slot). ARGV[1], ARGV[2]: clock.lua's.
-- Reply: per live counter {k (the counter's key text), v (its value), µs left in its window}.
-- `now` comes from clock.lua, joined before this file.

local listed = {}
for _, key in ipairs(KEYS) do
  local fields = redis.call('HMGET', key, 'k', 'v', 'e')
  local ends = tonumber(fields[3]) or 0
  if fields[1] and ends > now then
    listed[#listed + 1] = {fields[1], tonumber(fields[2]) or 0, ends - now}
  end
end
return listed
