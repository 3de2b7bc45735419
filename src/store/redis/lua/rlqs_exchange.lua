-- RLQS across floodgates (src/store/redis/rlqs_exchange.rs): each instance publishes, per
-- bucket, what its Envoys offer together, and reads what every other instance published
-- recently; each then takes its part of the bucket's limit (core::policy::rlqs::share::instance_part).
-- One call per domain: the keys carry the domain's hash tag, so they share one slot.
--
-- Which entries count is core::policy::rlqs::peers::peer_entry: published within the horizon, live;
-- older but within the memory, remembered (an instance that stopped may have Envoys still
-- enforcing the parts it gave them); past the memory, or older than the horizon when the
-- caller retires the stopped ones, deleted.
--
-- KEYS: one hash per bucket, field = instance, value = '<demand> <unix ms>' (demand '' while
--       the instance has not measured one).
-- ARGV: the instance id, the horizon in ms, the memory in ms, '1' to retire the instances that
--       stopped publishing ('0' not to), then one demand per key.
-- Reply: per key, the number of other instances' entries that count, then their demands, all
--        as strings.
-- Now is Redis TIME: one clock for every instance.

if redis.replicate_commands then
  redis.replicate_commands()
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local instance = ARGV[1]
local horizon = tonumber(ARGV[2])
local memory = math.max(tonumber(ARGV[3]), horizon)
local retire = ARGV[4] == '1'
local stamp = string.format('%d', now)
local reply = {}
for index, key in ipairs(KEYS) do
  redis.call('HSET', key, instance, ARGV[index + 4] .. ' ' .. stamp)
  redis.call('PEXPIRE', key, memory)
  local fields = redis.call('HGETALL', key)
  local count_at = #reply + 1
  reply[count_at] = '0'
  local count = 0
  for at = 1, #fields, 2 do
    local field = fields[at]
    if field ~= instance then
      local demand, published = string.match(fields[at + 1], '^(%S*) (%d+)$')
      local age = published and now - tonumber(published)
      if age and (age <= horizon or (not retire and age <= memory)) then
        count = count + 1
        reply[#reply + 1] = demand
      else
        redis.call('HDEL', key, field)
      end
    end
  end
  reply[count_at] = tostring(count)
end
return reply
