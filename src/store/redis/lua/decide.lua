-- Part 6: one request, decided atomically (src/store/memory.rs does the same in Rust):
-- evaluate every counter (a counter named twice sees what its earlier mention would charge),
-- compute the verdict (core::verdict), then charge every admitted counter or none.
--
-- KEYS: the request's distinct counter keys.
-- ARGV: global_shadow ('1' or '0'), now ('' to read Redis TIME; a test clock's µs otherwise),
--       extra TTL in ms (0 unless a test clock runs: Redis expires keys on its own clock),
--       the number of counters, then per counter COUNTER_FIELDS values:
--       key index (into KEYS), algorithm, limit L, window W µs, capacity C, hits kind
--       ('charge', 'check' or 'refund'), hits amount, descriptor index, role
--       ('enforced', 'quota' or 'shadow'), reserve (units a priority class must leave
--       unused, core::algorithm::share; 0 without classes).
-- Reply: { over_limit, then per counter: admitted, remaining, reset_after µs, retry_after µs },
--        integers only (0/1 for booleans).

local COUNTER_FIELDS = 10

-- Redis runs a script's whole top level at every call. Defining all four algorithms each
-- time would cost more Redis CPU than a decision, so each is defined when a request first
-- needs it.
local COUNTER_KIND_DEFINITIONS = {
  fixed_window = define_fixed_window,
  sliding_window = define_sliding_window,
  sliding_log = define_sliding_log,
  gcra = define_gcra,
}
local counter_kinds = {}
local function counter_kind(name)
  local kind = counter_kinds[name]
  if kind == nil then
    local define = COUNTER_KIND_DEFINITIONS[name]
    if define == nil then
      error('floodgate: unknown algorithm ' .. tostring(name))
    end
    kind = define()
    counter_kinds[name] = kind
  end
  return kind
end

-- Before Redis 5 a script that reads TIME may only write with effects replication.
if redis.replicate_commands then
  redis.replicate_commands()
end

local global_shadow = ARGV[1] == '1'
local now = tonumber(ARGV[2])
if now == nil then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local extra_ttl_ms = tonumber(ARGV[3])

local counters = {}
for index = 1, tonumber(ARGV[4]) do
  local base = 4 + (index - 1) * COUNTER_FIELDS
  counters[index] = {
    key = tonumber(ARGV[base + 1]),
    kind = counter_kind(ARGV[base + 2]),
    quota = {
      limit = tonumber(ARGV[base + 3]),
      window = tonumber(ARGV[base + 4]),
      capacity = tonumber(ARGV[base + 5]),
    },
    hits_kind = ARGV[base + 6],
    hits = tonumber(ARGV[base + 7]),
    descriptor = tonumber(ARGV[base + 8]),
    role = ARGV[base + 9],
    reserve = tonumber(ARGV[base + 10]),
  }
end

-- Each key is read at most once, and only when no earlier mention answers for it. (A key
-- always belongs to one algorithm: the counter identity it is derived from names it.)
local stored = {}
local function stored_state(counter)
  local state = stored[counter.key]
  if state == nil then
    state = counter.kind.storage.load(KEYS[counter.key], now) or false
    stored[counter.key] = state
  end
  return state or nil
end

local evaluations = {}
for index, counter in ipairs(counters) do
  -- A counter named twice in one request sees what the latest earlier admitted mention would
  -- charge (that state is used even if it has already expired, as in memory).
  local state = nil
  for earlier = index - 1, 1, -1 do
    if counters[earlier].key == counter.key and evaluations[earlier].admitted then
      state = evaluations[earlier].next_state
      break
    end
  end
  if state == nil then
    state = stored_state(counter)
  end
  local view = counter.kind.at(counter.quota, state, now)
  evaluations[index] = evaluate_counter(view, counter.hits_kind, counter.hits, counter.reserve)
end

-- core::verdict::over_limit_ignoring_global_shadow: counters of one descriptor come together;
-- a descriptor is over when any of its counters is.
local function over_limit_ignoring_global_shadow()
  local enforced_over = false
  local quota_descriptors, quota_descriptors_over = 0, 0
  local index = 1
  while counters[index] do
    local first = counters[index]
    local over = false
    while counters[index] and counters[index].descriptor == first.descriptor do
      over = over or not evaluations[index].admitted
      index = index + 1
    end
    if first.role == 'enforced' then
      enforced_over = enforced_over or over
    elseif first.role == 'quota' then
      quota_descriptors = quota_descriptors + 1
      if over then
        quota_descriptors_over = quota_descriptors_over + 1
      end
    end
  end
  return enforced_over or (quota_descriptors > 0 and quota_descriptors_over == quota_descriptors)
end

local over_limit = not global_shadow and over_limit_ignoring_global_shadow()

local reply = { over_limit and 1 or 0 }
local final = {} -- key → the counter whose evaluation the key ends with
for index, counter in ipairs(counters) do
  local evaluation = evaluations[index]
  local charge = not over_limit and evaluation.admitted and counter.hits_kind ~= 'check'
  local snapshot = charge and evaluation.committed or evaluation.uncommitted
  if charge then
    final[counter.key] = index
  end
  reply[#reply + 1] = evaluation.admitted and 1 or 0
  reply[#reply + 1] = snapshot[1]
  reply[#reply + 1] = snapshot[2]
  reply[#reply + 1] = evaluation.retry_after
end

-- Every write carries its TTL: a key lives until its state means nothing (rounded up to the
-- ms), so an idle counter vanishes after its window or the time its bucket takes to refill.
-- A state that means nothing already (a refund emptied the counter) is deleted instead —
-- except under a test clock, which keeps it for extra_ttl_ms as the memory store keeps it,
-- so both agree even when the test's clock goes back.
for key, index in pairs(final) do
  local evaluation = evaluations[index]
  local ttl_ms = math.ceil((evaluation.expires_at - now) / 1000) + extra_ttl_ms
  if ttl_ms > 0 then
    counters[index].kind.storage.write(
      KEYS[key], evaluation.next_state, evaluation.expires_at, ttl_ms
    )
  else
    redis.call('UNLINK', KEYS[key])
  end
end

return reply
