-- floodgate's lease script: the concurrency rules' leases (core::arithmetic::lease), one call per request,
-- atomic as every script. Keep it in step with core/src/arithmetic/lease/mod.rs: the differential test
-- (tests/redis/redis_leases.rs) demands the same outcomes from both.
--
--   a counter   = a sorted set, one member per slot, score its expiry (µs); a score ≤ now is
--                 gone. An id's first slot is the member `id` (as earlier versions wrote a
--                 lease, so their sets read as one slot per id), its further ones `id NUL n`
--                 with n ≥ 2 the smallest free (floodgate refuses ids holding a NUL)
--   acquire id  : count + 1 + reserve ≤ max → admitted, one more slot for id, score now + ttl
--                 (an id holding slots takes another: one slot per acquire)
--                 past shed_above it must also survive (core::arithmetic::shed): draw × (count + 1)
--                 < shed_above × 2^32, or it is refused as shed, retry_after capped at 1 s
--                 otherwise → refused, retry_after = max(earliest expiry − now, 1)
--   release id  : admitted; frees the slot of id that expires soonest (an id holding no slot
--                 frees nothing)
--   all or nothing: when an acquire is refused, no call of the request changes anything.
--
-- KEYS: the request's distinct counters.
-- ARGV[1]: now in µs, or 'time' for Redis TIME; ARGV[2]: ms a key outlives its last slot
-- (a test clock's instants are not Redis's); then per call CALL_FIELDS values: key index,
-- action ('acquire' or 'release'), lease id, max in flight, reserve, lease ttl (µs), shed
-- threshold (0: none), draw (0..2^32).
-- Reply: per call admitted (1 or 0), slots in flight after it, retry_after (µs), released (1
-- or 0), held for (µs since the freed slot's acquire, expiry − ttl; 0 unless released), shed
-- (1 or 0). Shedding's products stay below 2^46: exact in doubles.
--
-- Scores are integers below 2^53 µs, exact in doubles; Redis returns them with 17
-- significant digits, so tonumber reads back exactly what was written.

local CALL_FIELDS = 8
local SHED_RETRY_AFTER = 1000000
local DRAW_RANGE = 4294967296
-- `now` and `extra_ttl_ms`: clock.lua, joined before this file.

-- The lease id a member holds a slot of: the member itself, or what comes before `NUL n`.
local function id_of(member)
  return string.match(member, '^(.*)%z%d+$') or member
end

-- key index → { slots = id → { member → expiry }, count = n, changed = member → expiry or
-- false }, read once per request with the expired slots left out.
local counters = {}
local function counter_at(index)
  local counter = counters[index]
  if counter then
    return counter
  end
  local slots, count = {}, 0
  local stored = redis.call('ZRANGE', KEYS[index], 0, -1, 'WITHSCORES')
  for at = 1, #stored, 2 do
    local expiry = tonumber(stored[at + 1])
    if expiry > now then
      local member = stored[at]
      local id = id_of(member)
      slots[id] = slots[id] or {}
      slots[id][member] = expiry
      count = count + 1
    end
  end
  counter = { slots = slots, count = count, changed = {} }
  counters[index] = counter
  return counter
end

-- One more slot for id until expiry, under the first member name of id that is free.
local function take(counter, id, expiry)
  local owned = counter.slots[id] or {}
  counter.slots[id] = owned
  local member, n = id, 1
  while owned[member] do
    n = n + 1
    member = id .. '\0' .. n
  end
  owned[member], counter.changed[member] = expiry, expiry
  counter.count = counter.count + 1
end

-- Frees id's slot that expires soonest: its expiry, or nil when id holds none.
local function free_soonest(counter, id)
  local owned = counter.slots[id]
  local soonest, soonest_expiry = nil, nil
  for member, expiry in pairs(owned or {}) do
    if not soonest_expiry or expiry < soonest_expiry then
      soonest, soonest_expiry = member, expiry
    end
  end
  if soonest then
    owned[soonest], counter.changed[soonest] = nil, false
    counter.count = counter.count - 1
  end
  return soonest_expiry
end

-- The expiry of the counter's first slot to expire (or the latest), `fallback` when empty.
local function expiry_edge(counter, pick, fallback)
  local edge = nil
  for _, owned in pairs(counter.slots) do
    for _, expiry in pairs(owned) do
      edge = edge and pick(edge, expiry) or expiry
    end
  end
  return edge or fallback
end

local reply = {}
local kept = true
local calls = (#ARGV - 2) / CALL_FIELDS
for call = 1, calls do
  local base = 2 + (call - 1) * CALL_FIELDS
  local counter = counter_at(tonumber(ARGV[base + 1]))
  local action, id = ARGV[base + 2], ARGV[base + 3]
  local max, reserve, ttl = tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]),
    tonumber(ARGV[base + 6])
  local shed_above, draw = tonumber(ARGV[base + 7]), tonumber(ARGV[base + 8])
  local admitted, retry_after, released, held_for, shed = 1, 0, 0, 0, 0
  if action == 'release' then
    local expiry = free_soonest(counter, id)
    if expiry then
      held_for = math.max(now - (expiry - math.max(ttl, 1)), 0)
      released = 1
    end
  elseif action == 'acquire' then
    local expiry = now + math.max(ttl, 1)
    local fits = counter.count + 1 + reserve <= max
    local depth = counter.count + 1
    local survives = shed_above == 0 or depth <= shed_above
      or draw * depth < shed_above * DRAW_RANGE
    if fits and survives then
      take(counter, id, expiry)
    else
      local earliest = expiry_edge(counter, math.min, expiry)
      admitted, retry_after, kept = 0, math.max(earliest - now, 1), false
      if fits then
        shed, retry_after = 1, math.min(retry_after, SHED_RETRY_AFTER)
      end
    end
  else
    error('floodgate: unknown lease action ' .. tostring(action))
  end
  reply[#reply + 1] = admitted
  reply[#reply + 1] = counter.count
  reply[#reply + 1] = retry_after
  reply[#reply + 1] = released
  reply[#reply + 1] = held_for
  reply[#reply + 1] = shed
end

if kept then
  for index, counter in pairs(counters) do
    local key = KEYS[index]
    if counter.count == 0 then
      redis.call('DEL', key)
    else
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
      for member, expiry in pairs(counter.changed) do
        if expiry then
          redis.call('ZADD', key, string.format('%d', expiry), member)
        else
          redis.call('ZREM', key, member)
        end
      end
      local last = math.max(now, expiry_edge(counter, math.max, now))
      -- The key goes when its last slot does (rounded up to whole ms).
      local ttl_ms = math.floor((last - now + 999) / 1000) + extra_ttl_ms
      redis.call('PEXPIRE', key, string.format('%d', math.max(ttl_ms, 1)))
    end
  end
end
return reply
