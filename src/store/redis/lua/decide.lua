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
--
-- Counters are read from ARGV where they are needed rather than gathered into tables, and the
-- reply is filled as counters are evaluated (see the cost note in prelude.lua).

local COUNTER_FIELDS = 10

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
local counter_count = tonumber(ARGV[4])

-- Algorithm name → the algorithm (see prelude.lua). Redis runs a script's whole top level at
-- every call, so each is defined when a request first needs it.
local counter_kinds = {}
-- Counter i answers in reply[4i − 2 .. 4i + 1]: admitted, the snapshot as committed, retry.
-- (Made at its full size for the common single counter: a table that grows is made again at
-- each doubling.)
local reply = counter_count == 1 and { 0, 0, 0, 0, 0 } or { 0 }
-- Counter i's snapshot if nothing is charged, at [2i − 1] and [2i], for those it would change.
local uncommitted = {}
-- Key → the state its next mention starts from: the last admitted mention's next state, or
-- what is stored (false: nothing). Each key is read at most once. (A key always belongs to one
-- algorithm: the counter identity it is derived from names it.)
local states = {}
-- Key → the state its last charge or refund leaves: what is written if the request commits.
local commits = {}

for index = 1, counter_count do
  local base = 4 + (index - 1) * COUNTER_FIELDS
  local key = tonumber(ARGV[base + 1])
  local name = ARGV[base + 2]
  local kind = counter_kinds[name]
  if kind == nil then
    if name == 'fixed_window' then
      kind = define_fixed_window()
    elseif name == 'sliding_window' then
      kind = define_sliding_window()
    elseif name == 'sliding_log' then
      kind = define_sliding_log()
    elseif name == 'gcra' then
      kind = define_gcra()
    else
      error('floodgate: unknown algorithm ' .. tostring(name))
    end
    counter_kinds[name] = kind
  end
  local state = states[key]
  if state == nil then
    state = kind('load', KEYS[key], now) or false
    states[key] = state
  end
  kind('at', tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]),
    state or nil, now)
  local hits_kind = ARGV[base + 6]
  local admitted, remaining, reset_after, before_remaining, before_reset_after, retry_after =
    evaluate_counter(kind, hits_kind, tonumber(ARGV[base + 7]), tonumber(ARGV[base + 10]))
  local at = 4 * index - 2
  reply[at] = admitted and 1 or 0
  reply[at + 1] = remaining
  reply[at + 2] = reset_after
  reply[at + 3] = retry_after
  -- A later mention of this key sees what this one would charge (that state is used even if
  -- it has already expired, as in memory).
  if admitted and hits_kind == 'check' then
    -- A new table: the last commit's state must stay as it is.
    states[key] = kind('state')
  elseif admitted then
    -- The key's state has served its mentions so far: its table can take the next one.
    local next_state = kind('state', state or nil)
    states[key] = next_state
    commits[key] = next_state
    uncommitted[2 * index - 1], uncommitted[2 * index] = before_remaining, before_reset_after
  end
end

-- core::verdict::over_limit_ignoring_global_shadow: counters of one descriptor come together;
-- a descriptor is over when any of its counters is. (Descriptor indexes are compared as the
-- strings script.rs writes, one per integer.)
local over_limit = false
if not global_shadow then
  local enforced_over = false
  local quota_descriptors, quota_descriptors_over = 0, 0
  local index = 1
  while index <= counter_count do
    local base = 4 + (index - 1) * COUNTER_FIELDS
    local descriptor, role = ARGV[base + 8], ARGV[base + 9]
    local over = false
    repeat
      over = over or reply[4 * index - 2] == 0
      index = index + 1
    until index > counter_count or ARGV[4 + (index - 1) * COUNTER_FIELDS + 8] ~= descriptor
    if role == 'enforced' then
      enforced_over = enforced_over or over
    elseif role == 'quota' then
      quota_descriptors = quota_descriptors + 1
      if over then
        quota_descriptors_over = quota_descriptors_over + 1
      end
    end
  end
  over_limit = enforced_over
    or (quota_descriptors > 0 and quota_descriptors_over == quota_descriptors)
end

if over_limit then
  -- Nothing is charged: every counter shows itself as it is.
  reply[1] = 1
  for index = 1, counter_count do
    if uncommitted[2 * index - 1] ~= nil then
      reply[4 * index - 1], reply[4 * index] = uncommitted[2 * index - 1], uncommitted[2 * index]
    end
  end
  return reply
end

-- Every write carries its TTL: a key lives until its state means nothing (rounded up to the
-- ms), so an idle counter vanishes after its window or the time its bucket takes to refill.
-- A state that means nothing already (a refund emptied the counter) is deleted instead —
-- except under a test clock, which keeps it for extra_ttl_ms as the memory store keeps it,
-- so both agree even when the test's clock goes back.
for index = 1, counter_count do
  local base = 4 + (index - 1) * COUNTER_FIELDS
  local key = tonumber(ARGV[base + 1])
  local state = commits[key]
  if state then
    commits[key] = nil -- written once, with its last commit
    local ttl_ms = math.ceil((state[1] - now) / 1000) + extra_ttl_ms
    if ttl_ms > 0 then
      counter_kinds[ARGV[base + 2]]('write', KEYS[key], state, ttl_ms)
    else
      redis.call('UNLINK', KEYS[key])
    end
  end
end

return reply
