-- The hybrid store's sync script (--store hybrid), after prelude.lua: one call sends an
-- instance's unsent hits for all its counters, reads back each counter's global state, and
-- says how many instances synced recently. core::arithmetic::hybrid::add_hits is the same merge in Rust
-- (keep them in step; tests/redis/hybrid_sync_differential.rs compares them). The states are
-- those decide.lua reads and writes ("F <expires_at> <start> <count>", "S <expires_at> <start>
-- <previous> <current>"), so a counter can be decided exactly by decide.lua between syncs.
--
-- KEYS[1]: the set of instances (a sorted set: instance id → when it last synced, ms);
-- KEYS[2]: each instance's last sync applied (a hash: instance id → sequence number);
-- KEYS[3..]: the counters' keys.
-- ARGV: the number of items; now ('' to read Redis TIME; a test clock's µs otherwise); extra
--       TTL in ms (0 unless a test clock runs); this instance's id ('' to register nothing);
--       how long an instance counts as present after its last sync (ms); the sync's sequence
--       number (a sync sent again after its answer was lost carries the same: its hits are
--       not added twice); then per item ITEM_FIELDS values: key index (1 is KEYS[3]), algorithm ('fixed_window' or
--       'sliding_window'), window W (µs, or −N for N calendar months), the start of the
--       window the hits were counted in, hits (0 only reads).
-- Reply: Redis now (µs), the instances present, then per item: whether a state is held
--        (0/1), its window start, previous count (0 for a fixed window), current count.

local ITEM_FIELDS = 5
local HEADER_FIELDS = 6
local KEY_BASE = 2
-- How long an instance's last sequence number is kept (ms): far beyond any retry.
local APPLIED_TTL_MS = 3600000
local MAX_COUNT = 4294967295

if redis.replicate_commands then
  redis.replicate_commands()
end

local item_count = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
if now == nil then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local extra_ttl_ms = tonumber(ARGV[3])
local instance = ARGV[4]
local horizon_ms = tonumber(ARGV[5])
local sequence = tonumber(ARGV[6])

-- A sync already applied (its answer was lost on the way back): read, add nothing.
local replay = false
if instance ~= '' and sequence > 0 then
  local applied = tonumber(redis.call('HGET', KEYS[2], instance) or '0')
  if sequence <= applied then
    replay = true
  else
    redis.call('HSET', KEYS[2], instance, string.format('%d', sequence))
    redis.call('PEXPIRE', KEYS[2], APPLIED_TTL_MS)
  end
end

local now_ms = math.floor(now / 1000)
if instance ~= '' then
  redis.call('ZADD', KEYS[1], now_ms, instance)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now_ms - horizon_ms))
local instances = redis.call('ZCARD', KEYS[1])
if instances > 0 then
  redis.call('PEXPIRE', KEYS[1], string.format('%d', 2 * horizon_ms))
end

-- The window just before the one starting at `start`.
local function before(start, window)
  local previous_start = window_span(start - 1, window)
  return previous_start
end

-- key index → { expires_at, start, count } or { expires_at, start, previous, current }, or
-- false (nothing held); changed[index]: written at the end.
local states, changed = {}, {}
local reply = { now, instances }

for item = 1, item_count do
  local base = HEADER_FIELDS + (item - 1) * ITEM_FIELDS
  local index = tonumber(ARGV[base + 1])
  local sliding = ARGV[base + 2] == 'sliding_window'
  local window = tonumber(ARGV[base + 3])
  local at = tonumber(ARGV[base + 4])
  local hits = tonumber(ARGV[base + 5])
  local key = KEYS[index + KEY_BASE]
  if replay then
    hits = 0
  end
  local state = states[index]
  if state and state[1] <= now then
    -- Made dead on arrival by an earlier item (hits of a window long gone): as if absent.
    state = false
  end
  if state == nil then
    if sliding then
      state = load_state(key, SLIDING_WINDOW_PATTERN, now) or false
    else
      state = load_state(key, FIXED_WINDOW_PATTERN, now) or false
    end
  end
  if hits > 0 then
    local _, stop = window_span(at, window)
    if sliding then
      local _, expires_at = window_span(stop, window)
      if not state then
        state = { expires_at, at, 0, math.min(hits, MAX_COUNT) }
      elseif state[2] == at then
        state[4] = math.min(state[4] + hits, MAX_COUNT)
      elseif state[2] < at then
        local carried = 0
        if before(at, window) == state[2] then
          carried = state[4]
        end
        state = { expires_at, at, carried, math.min(hits, MAX_COUNT) }
      elseif before(state[2], window) == at then
        state[3] = math.min(state[3] + hits, MAX_COUNT)
      end
    else
      if not state or state[2] < at then
        state = { stop, at, math.min(hits, MAX_COUNT) }
      elseif state[2] == at then
        state[3] = math.min(state[3] + hits, MAX_COUNT)
      end
    end
    changed[index] = true
  end
  states[index] = state
  if state then
    reply[#reply + 1] = 1
    reply[#reply + 1] = state[2]
    if sliding then
      reply[#reply + 1] = state[3]
      reply[#reply + 1] = state[4]
    else
      reply[#reply + 1] = 0
      reply[#reply + 1] = state[3]
    end
  else
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
  end
end

for index, _ in pairs(changed) do
  local state = states[index]
  if state then
    local ttl_ms = math.ceil((state[1] - now) / 1000) + extra_ttl_ms
    if ttl_ms > 0 then
      if #state == 4 then
        write_state(KEYS[index + KEY_BASE], SLIDING_WINDOW_FORMAT, state, ttl_ms)
      else
        write_state(KEYS[index + KEY_BASE], FIXED_WINDOW_FORMAT, state, ttl_ms)
      end
    end
  end
end

return reply
