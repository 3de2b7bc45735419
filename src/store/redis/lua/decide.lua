-- Part 6: requests decided atomically, one after the other in the order given (core::decision::charging::
-- settle does the same in Rust, for the memory store). Each request: evaluate every counter (a
-- counter named twice sees what its earlier mention would leave), settle the request in units —
-- the whole request (all or nothing), or each descriptor with --charge every-descriptor — and
-- write what the units keep, before the next request reads anything. So a request decides here
-- exactly as it would in a call of its own made at that point: a batch only shares the call's
-- cost (the EVALSHA, the script's set-up, TIME) between its requests.
--
-- KEYS: each request's distinct counter keys, request after request.
-- ARGV: what the batch's requests share, then the requests. Requests of one call mostly name
--       the same few limits, and every ARGV string costs Redis about as much to receive as a
--       counter's arithmetic (about 800 instructions), so each distinct set of settings and
--       each distinct counter template is sent once per call and requests point at them: a
--       request of one counter is 1 string, not 15.
--       BATCH_FIELDS values: the number of requests, of settings and of counter templates;
--       then per settings SETTINGS_FIELDS values: global_shadow ('1' or '0'), now ('' to read
--       Redis TIME, once per call; a test clock's µs otherwise), extra TTL in ms (0 unless a
--       test clock runs: Redis expires keys on its own clock), the charging mode
--       ('all-or-nothing', 'every-descriptor' or 'all-or-refused': one unit, as all or
--       nothing, which stops when any counter refuses; the rest is in the hits kinds);
--       then per counter template TEMPLATE_FIELDS values: algorithm, limit L, window W µs (−N:
--       N calendar months), capacity C ("C delay max_wait" for a leaky bucket that queues,
--       gcra.lua), hits kind ('charge', 'record': a charge counted
--       whatever its verdict, 'record-refused': a charge counted when refused and kept then,
--       kept when admitted only if its unit passes, 'check' or 'refund'), hits amount (of a check: the hits its
--       rule asks to fit, 1 or 0, core::arithmetic::algorithm::CheckRule), role ('enforced', 'quota' or
--       'shadow'), reserve (units a priority class must leave unused, core::arithmetic::algorithm::share;
--       0 without classes);
--       then per request, if it has one counter (most do), one negative value, −((template −
--       1) · the number of settings + settings), its key the request's one key; otherwise
--       REQUEST_FIELDS values: the number of its counters, its settings (1 is the first), and
--       per counter of that request COUNTER_FIELDS values: key index (into the request's own
--       keys: 1 is its first), template (1 is the first), descriptor index.
--       A request's keys are numbered in order of first mention, so its highest key index is
--       how many of KEYS are its own.
-- Reply: per request, in order: over_limit, then per counter: admitted, remaining,
--        reset_after µs, retry_after µs (refused) or the wait µs (admitted: a queueing leaky
--        bucket's turn, else 0), charged; integers only (0/1 for booleans).
--
-- Counters are read from ARGV where they are needed rather than gathered into tables, the reply
-- is filled as counters are evaluated, and the functions and tables below are made once per
-- call, not per request: the functions read the request being decided from the locals its loop
-- sets, and each request leaves the tables empty for the next (see the cost note in
-- prelude.lua; in a batch a request costs Redis about half what it costs alone).

local BATCH_FIELDS = 3
local SETTINGS_FIELDS = 4
local TEMPLATE_FIELDS = 8
local REQUEST_FIELDS = 2
local COUNTER_FIELDS = 3
local REPLY_FIELDS = 5

-- Before Redis 5 a script that reads TIME may only write with effects replication.
if redis.replicate_commands then
  redis.replicate_commands()
end

-- Redis TIME, read when a request first needs it: the same instant for every request of the
-- call, which Redis runs as one atomic step.
local redis_now

-- Whether a write that leaves its key's expiry where it was may keep the key's TTL (SET …
-- KEEPTTL, Redis 6.0) rather than set it again (SET … PX costs Redis more than a plain SET).
-- Redis tells scripts its version from 7.0; an older one sets the TTL every time.
local keep_ttl = redis.REDIS_VERSION_NUM ~= nil

-- Algorithm name → the algorithm (see prelude.lua). Redis runs a script's whole top level at
-- every call, so each is defined when a request first needs it.
local counter_kinds = {}

local request_count = tonumber(ARGV[1])
-- Where the settings (settings s's field f is ARGV[settings_base + (s − 1) · SETTINGS_FIELDS
-- + f]) and the templates (likewise from templates_base) start.
local settings_base = BATCH_FIELDS
local templates_base = settings_base + tonumber(ARGV[2]) * SETTINGS_FIELDS
-- The request being decided: its settings (now_is_redis_time: its now is Redis TIME), where
-- its counters start in ARGV (counter i's field f is ARGV[argv_base + (i − 1) ·
-- COUNTER_FIELDS + f]), where its keys start in KEYS, and where its answer starts in the reply
-- (its over_limit is reply[reply_base + 1]).
local global_shadow, now, now_is_redis_time, extra_ttl_ms, counter_count, every_descriptor
local all_or_refused
local argv_base = templates_base + tonumber(ARGV[3]) * TEMPLATE_FIELDS + REQUEST_FIELDS
local key_base, reply_base = 0, 0
-- Counter i of the request answers in reply[reply_base + 5i − 3 .. reply_base + 5i + 1]:
-- admitted, the snapshot as committed, retry, charged. (Made at its full size for the common
-- lone request of one counter: a table that grows is made again at each doubling.)
local reply = (request_count == 1 and tonumber(ARGV[argv_base - REQUEST_FIELDS + 1]) < 0)
    and { 0, 0, 0, 0, 0, 0 }
  or { 0 }
-- Per request, emptied by its last loop (entries of the request's counters and keys only):
-- counter i's snapshot if nothing is charged, at [2i − 1] and [2i], for those it would change;
local uncommitted = {}
-- key → the state its next mention starts from: within a unit, the last mention's next state
-- that the unit keeps if it passes; else the last kept one, or what is stored (false:
-- nothing). Each key is read at most once per request. (A key always belongs to one
-- algorithm: the counter identity it is derived from names it.)
local states = {}
-- key → true while states[key] is a recorded mention's next state: kept whatever the verdict,
-- so a later mention that may be given up must not change that table in place.
local pinned = {}
-- counter i → the state it leaves, when it changes its counter (admitted or recorded, not a
-- check): what its key holds if it is kept. (The same limit may be named with another size,
-- after a reload: a bucket's state is written in terms of the limit that made it, so a check
-- under another limit would write it otherwise.)
local next_states = {}
-- key → the state its last kept mention leaves: what is written.
local commits = {}
-- key → the expiry of the state Redis held (nil: none), which a write that leaves it unchanged
-- keeps with the key's TTL. Made by the first request of several counters.
local stored_expiries
-- Every descriptor only (all or nothing has one unit, which may change any table and is never
-- given up, so it uses neither table: they are nil for its requests):
-- key → what Redis holds (false: nothing), which a given-up unit goes back to;
local loaded, loaded_table = nil, {}
-- key → the first counter of the unit whose table states[key] is: only that unit may change
-- the table in place (a table of an earlier unit may be what a commit or a given-up unit goes
-- back to).
local made_in, made_in_table = nil, {}

-- The algorithm called `name`, defined on its first use in the call.
local function kind_named(name)
  local kind
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
  return kind
end

-- Where counter `index` of the request finds its template: the template's field f is
-- ARGV[template_of(index) + f] (1 algorithm, 2 limit, 3 window, 4 capacity, 5 hits kind,
-- 6 hits, 7 role, 8 reserve).
local function template_of(index)
  return templates_base
    + (number(ARGV[argv_base + (index - 1) * COUNTER_FIELDS + 2]) - 1) * TEMPLATE_FIELDS
end

-- Whether the counters first..last, whose descriptors come together, are over their limits
-- (core::ground::verdict::request_over_limit): a descriptor is over when any of its counters is. (A
-- descriptor index is compared as the string script.rs writes, one per integer.)
local function over_limit_of(first, last)
  if global_shadow then
    return false
  end
  local enforced_over = false
  local quota_descriptors, quota_descriptors_over = 0, 0
  local index = first
  while index <= last do
    local descriptor = ARGV[argv_base + (index - 1) * COUNTER_FIELDS + 3]
    local role = ARGV[template_of(index) + 7]
    local over = false
    repeat
      over = over or reply[reply_base + REPLY_FIELDS * index - 3] == 0
      index = index + 1
    until index > last or ARGV[argv_base + (index - 1) * COUNTER_FIELDS + 3] ~= descriptor
    if role == 'enforced' then
      enforced_over = enforced_over or over
    elseif role == 'quota' then
      quota_descriptors = quota_descriptors + 1
      if over then
        quota_descriptors_over = quota_descriptors_over + 1
      end
    end
  end
  return enforced_over
    or (quota_descriptors > 0 and quota_descriptors_over == quota_descriptors)
end

-- Whether any of the counters first..last refused, whatever its role: under all-or-refused
-- (core::decision::charging, Settling::unit_stops) such a unit keeps only what it records, as the
-- reference's getHitsAddend stops the increments on any key that would go over.
local function any_refused(first, last)
  for index = first, last do
    if reply[reply_base + REPLY_FIELDS * index - 3] == 0 then
      return true
    end
  end
  return false
end

-- Settles the unit of counters first..last: which keep their new state (not a check, and
-- admitted in a unit that passes, or recorded), what their keys go back to when not. Whether
-- the unit is over its limits.
local function settle_unit(first, last)
  local unit_over = over_limit_of(first, last)
  local stops = unit_over
  if all_or_refused then
    stops = any_refused(first, last)
  end
  for index = first, last do
    local base = argv_base + (index - 1) * COUNTER_FIELDS
    local at = reply_base + REPLY_FIELDS * index - 3
    local admitted = reply[at] == 1
    local hits_kind = ARGV[template_of(index) + 5]
    local kept = hits_kind ~= 'check' and ((admitted and not stops) or hits_kind == 'record'
      or (hits_kind == 'record-refused' and not admitted))
    if kept then
      commits[number(ARGV[base + 1])] = next_states[index]
      reply[at + 4] = 1
    end
    -- Shown after the charge only when admitted and kept.
    if not (kept and admitted) and uncommitted[2 * index - 1] ~= nil then
      reply[at + 1], reply[at + 2] = uncommitted[2 * index - 1], uncommitted[2 * index]
    end
  end
  if not every_descriptor then
    return unit_over -- the only unit: nothing starts from its states
  end
  for index = first, last do
    local key = number(ARGV[argv_base + (index - 1) * COUNTER_FIELDS + 1])
    if made_in[key] == first and commits[key] ~= states[key] then
      -- Given up: later units start from the last kept state, or from what Redis holds.
      states[key] = commits[key] or loaded[key]
      made_in[key] = nil
    end
  end
  return unit_over
end

-- Whether a write of a state expiring at `expires_at` may keep its key's TTL: the state Redis
-- held expires then too, so the TTL written with it still holds (`expires_at` rounded up to
-- the ms, on Redis's clock). Only on Redis time: a test clock's TTL counts on another clock,
-- plus its extra.
local function keeps_ttl(expires_at, stored_expiry)
  return keep_ttl and now_is_redis_time and expires_at == stored_expiry
end

-- A request of one counter (the common case), decided without the tables a request of several
-- needs: its one unit sees no other mention of its key and is never given up once kept, so
-- its state is changed in place and written if kept. The same verdict as the general path
-- below (the differential tests run both): over ⇔ refused unless shadowed; kept ⇔ not a check
-- and admitted or recorded; the reply shows the snapshot after the charge only if admitted.
-- A charge, the most common request of all, the algorithm decides and writes in one call
-- ('charge_alone', given the capacity as sent: the windows have no use for it), except the
-- sliding log's (its log is a hash, read and written in parts).
local function decide_lone_counter(template)
  local name = ARGV[template + 1]
  local kind = counter_kinds[name] or kind_named(name)
  local key = KEYS[key_base + 1]
  local hits_kind = ARGV[template + 5]
  local hits = number(ARGV[template + 6])
  local admitted, remaining, reset_after, retry_after, kept
  if hits_kind == 'charge' and name ~= 'sliding_log' then
    admitted, remaining, reset_after, retry_after = kind('charge_alone', key,
      number(ARGV[template + 2]), number(ARGV[template + 3]), ARGV[template + 4], hits,
      hits + number(ARGV[template + 8]), now, extra_ttl_ms, keep_ttl and now_is_redis_time)
    kept = admitted
  else
    local state = kind('load', key, now)
    local stored_expiry = state and state[1]
    kind('at', number(ARGV[template + 2]), number(ARGV[template + 3]), ARGV[template + 4],
      state, now)
    -- Alone, a counter's unit passes exactly when it admits: a charge recorded when refused is
    -- kept either way.
    local recorded = hits_kind == 'record' or hits_kind == 'record-refused'
    local before_remaining, before_reset_after
    admitted, remaining, reset_after, before_remaining, before_reset_after, retry_after =
      evaluate_counter(kind, hits_kind, hits, number(ARGV[template + 8]), recorded)
    if not admitted then
      remaining, reset_after = before_remaining, before_reset_after
    end
    kept = hits_kind ~= 'check' and (admitted or recorded)
    if kept then
      local next_state = kind('state', state)
      local ttl_ms = math.ceil((next_state[1] - now) / 1000) + extra_ttl_ms
      if ttl_ms > 0 then
        kind('write', key, next_state, ttl_ms, keeps_ttl(next_state[1], stored_expiry))
      else
        redis.call('UNLINK', key)
      end
    end
  end
  local over = not admitted and not global_shadow and ARGV[template + 7] ~= 'shadow'
  reply[reply_base + 1] = over and 1 or 0
  reply[reply_base + 2] = admitted and 1 or 0
  reply[reply_base + 3], reply[reply_base + 4] = remaining, reset_after
  reply[reply_base + 5] = retry_after
  reply[reply_base + 6] = kept and 1 or 0
end

-- A request of several counters: evaluated counter by counter, settled unit by unit, written
-- at the end. How many of KEYS are the request's.
local function decide_several_counters()
  loaded = every_descriptor and loaded_table or nil
  made_in = every_descriptor and made_in_table or nil
  stored_expiries = stored_expiries or {}
  -- The request's over_limit, set once its counters are: filled now so the reply stays a
  -- sequence (Redis returns a table only up to its first hole).
  reply[reply_base + 1] = 0
  -- How many of KEYS are this request's: its highest key index.
  local key_count = 0

  local unit_first, last_unit_over = 1, nil
  for index = 1, counter_count do
    local base = argv_base + (index - 1) * COUNTER_FIELDS
    local template = template_of(index)
    local key = number(ARGV[base + 1])
    local name = ARGV[template + 1]
    local kind = counter_kinds[name] or kind_named(name)
    if key > key_count then
      key_count = key
    end
    local state = states[key]
    if state == nil then
      state = kind('load', KEYS[key_base + key], now) or false
      states[key] = state
      stored_expiries[key] = state and state[1] or nil
      if loaded then
        loaded[key] = state
      end
    end
    local hits_kind = ARGV[template + 5]
    local recorded = hits_kind == 'record'
    local recorded_when_refused = hits_kind == 'record-refused'
    -- May this counter change its key's table in place? A recorded count is always kept;
    -- any other only if the table is not a recorded mention's (pinned), and, with every
    -- descriptor, only a table this unit made.
    local own = recorded
      or (not pinned[key] and (not every_descriptor or made_in[key] == unit_first))
    if state and not own and name == 'sliding_log' then
      -- The log is changed by 'at' and 'charge' in place, and this unit may be given up.
      state = kind('copy', state)
    end
    kind('at', number(ARGV[template + 2]), number(ARGV[template + 3]), ARGV[template + 4],
      state or nil, now)
    local admitted, remaining, reset_after, before_remaining, before_reset_after, retry_after =
      evaluate_counter(kind, hits_kind, number(ARGV[template + 6]), number(ARGV[template + 8]),
        recorded or recorded_when_refused)
    -- Refused, a charge recorded when refused is kept whatever the unit's verdict.
    recorded = recorded or (recorded_when_refused and not admitted)
    local at = reply_base + REPLY_FIELDS * index - 3
    reply[at] = admitted and 1 or 0
    reply[at + 1] = remaining
    reply[at + 2] = reset_after
    reply[at + 3] = retry_after
    reply[at + 4] = 0
    -- A later mention of this key in the unit sees what this one would leave (that state is
    -- used even if it has already expired, as in memory).
    if admitted and hits_kind == 'check' then
      -- A new table: the last commit's state must stay as it is.
      states[key], pinned[key] = kind('state'), nil
      if made_in then
        made_in[key] = unit_first
      end
    elseif admitted or recorded then
      -- A table this counter may change serves as the next state's (the log is its own).
      local next_state = kind('state', own and state or nil)
      states[key], next_states[index] = next_state, next_state
      pinned[key] = recorded or nil
      if made_in then
        made_in[key] = unit_first
      end
      uncommitted[2 * index - 1], uncommitted[2 * index] = before_remaining, before_reset_after
    end
    local last_of_unit = index == counter_count
      or (every_descriptor and ARGV[base + COUNTER_FIELDS + 3] ~= ARGV[base + 3])
    if last_of_unit then
      last_unit_over = settle_unit(unit_first, index)
      unit_first = index + 1
    end
  end

  -- All or nothing: the one unit's verdict is the request's.
  local request_over = last_unit_over
  if every_descriptor or request_over == nil then
    request_over = over_limit_of(1, counter_count)
  end
  reply[reply_base + 1] = request_over and 1 or 0

  -- Every write carries its TTL: a key lives until its state means nothing (rounded up to the
  -- ms), so an idle counter vanishes after its window or the time its bucket takes to refill.
  -- A state that means nothing already (a refund emptied the counter) is deleted instead —
  -- except under a test clock, which keeps it for extra_ttl_ms as the memory store keeps it,
  -- so both agree even when the test's clock goes back. The tables are emptied on the way.
  for index = 1, counter_count do
    local base = argv_base + (index - 1) * COUNTER_FIELDS
    local key = number(ARGV[base + 1])
    local stored_expiry = stored_expiries[key]
    states[key], next_states[index], pinned[key], stored_expiries[key] = nil, nil, nil, nil
    uncommitted[2 * index - 1], uncommitted[2 * index] = nil, nil
    if made_in then
      loaded[key], made_in[key] = nil, nil
    end
    local state = commits[key]
    if state then
      commits[key] = nil -- written once, with its last commit
      local ttl_ms = math.ceil((state[1] - now) / 1000) + extra_ttl_ms
      if ttl_ms > 0 then
        counter_kinds[ARGV[template_of(index) + 1]]('write', KEYS[key_base + key], state, ttl_ms,
          keeps_ttl(state[1], stored_expiry))
      else
        redis.call('UNLINK', KEYS[key_base + key])
      end
    end
  end
  return key_count
end

local settings_count = tonumber(ARGV[2])
for _ = 1, request_count do
  local request = argv_base - REQUEST_FIELDS
  local head = number(ARGV[request + 1])
  local settings_index, lone_template, fields
  if head < 0 then
    local code = -head - 1
    local template_index = math.floor(code / settings_count)
    settings_index = code - template_index * settings_count + 1
    lone_template = templates_base + template_index * TEMPLATE_FIELDS
    counter_count, fields = 1, 1
  else
    counter_count = head
    settings_index = number(ARGV[request + 2])
    fields = REQUEST_FIELDS + counter_count * COUNTER_FIELDS
  end
  local settings = settings_base + (settings_index - 1) * SETTINGS_FIELDS
  global_shadow = ARGV[settings + 1] == '1'
  now = tonumber(ARGV[settings + 2])
  now_is_redis_time = now == nil
  if now == nil then
    if redis_now == nil then
      local time = redis.call('TIME')
      redis_now = tonumber(time[1]) * 1000000 + tonumber(time[2])
    end
    now = redis_now
  end
  extra_ttl_ms = number(ARGV[settings + 3])
  every_descriptor = ARGV[settings + 4] == 'every-descriptor'
  all_or_refused = ARGV[settings + 4] == 'all-or-refused'
  local key_count = 1
  if lone_template then
    decide_lone_counter(lone_template)
  else
    key_count = decide_several_counters()
  end

  argv_base = argv_base + fields
  key_base = key_base + key_count
  reply_base = reply_base + 1 + REPLY_FIELDS * counter_count
end

return reply
