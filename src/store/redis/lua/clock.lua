-- The clock part of the lease, ban and Limitador-counter scripts, joined before each (leases.rs,
-- bans.rs, held_windows.rs): ARGV[1] is now in µs, or 'time' for Redis TIME; ARGV[2] the ms a
-- key outlives what it records (a test clock's instants are not Redis's).
local now
if ARGV[1] == 'time' then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
else
  now = tonumber(ARGV[1])
end
local extra_ttl_ms = tonumber(ARGV[2])
