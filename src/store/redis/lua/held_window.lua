-- floodgate's script for Limitador-format counters (core::arithmetic::held_window): fixed windows
-- that start at a counter's first touch, and the holds of reservations, one call per request,
-- atomic as every script. Keep it in step with core/src/arithmetic/held_window.rs and
-- src/store/held_windows/memory.rs: the differential test (tests/redis/redis_held_windows.rs)
-- demands the same answers from both.
--
--   a counter = a hash: v (value), e (its window's end, µs; ≤ now: closed, reads 0), k (the
--               counter's key, for listing), and per hold a:<id> (amount) and x:<id> (expiry)
--   check     : limited when value + delta > max_value for any counter (holds ignored);
--               'check_apply' also adds delta to all of them when none is limited
--   add       : adds delta to every counter (a closed window starts again at delta)
--   reserve   : starts each closed window (a zero add); limited when value + outstanding + check
--               > max_value for any; else, when hold > 0, each counter keeps the hold until
--               now + min(ttl, its window's remaining), its dead holds dropped
--   release   : drops the hold id from every counter; released when any whose window still
--               runs held it
--
-- KEYS: the counters. ARGV[1]: now in µs, or 'time' for Redis TIME; ARGV[2]: ms a key outlives
-- its window (a test clock's instants are not Redis's); ARGV[3]: the operation; ARGV[4]: delta
-- or check amount; ARGV[5]: hold amount; ARGV[6]: hold ttl (µs); ARGV[7]: hold id; then per
-- counter COUNTER_FIELDS values: max value, window (µs), key text.
-- Reply: limited_by (0: none, else the 1-based counter), then per counter remaining and window
-- ttl (µs; a closed window reads as a whole one); for release, released (1 or 0).
-- Values and instants are integers below 2^53, exact in doubles.

local COUNTER_FIELDS = 3
-- `now` and `extra_ttl_ms`: clock.lua, joined before this file.
local operation = ARGV[3]
local amount = tonumber(ARGV[4])
local hold = tonumber(ARGV[5])
local hold_ttl = tonumber(ARGV[6])
local hold_id = ARGV[7]

local function counter(i)
  local base = 7 + (i - 1) * COUNTER_FIELDS
  return tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), ARGV[base + 3]
end

local function window_of(key)
  local fields = redis.call('HMGET', key, 'v', 'e')
  return tonumber(fields[1]) or 0, tonumber(fields[2]) or 0
end

-- The value at now and the window's remaining time (a whole window when closed).
local function reading(key, window)
  local value, ends = window_of(key)
  if ends <= now then
    return 0, window
  end
  return value, ends - now
end

local function expire(key, ends)
  local ms = math.ceil((ends - now) / 1000) + extra_ttl_ms
  redis.call('PEXPIRE', key, math.max(ms, 1))
end

-- Adds delta, starting a new window when the last one has closed; the value after and the end.
local function window_add(key, delta, window, text)
  local value, ends = window_of(key)
  if ends <= now then
    -- A closed window's holds were all dead: a new window starts without them.
    redis.call('DEL', key)
    value = delta
    ends = now + window
    redis.call('HSET', key, 'v', value, 'e', ends, 'k', text)
    expire(key, ends)
  else
    value = value + delta
    redis.call('HSET', key, 'v', value)
  end
  return value, ends
end

local function outstanding(key, prune)
  local fields = redis.call('HGETALL', key)
  local sum = 0
  for i = 1, #fields, 2 do
    local name = fields[i]
    if string.sub(name, 1, 2) == 'x:' then
      local id = string.sub(name, 3)
      if tonumber(fields[i + 1]) > now then
        sum = sum + tonumber(redis.call('HGET', key, 'a:' .. id) or 0)
      elseif prune then
        redis.call('HDEL', key, 'a:' .. id, name)
      end
    end
  end
  return sum
end

local function answer(limited_by, maxes, used, ttls)
  local reply = {limited_by}
  for i = 1, #KEYS do
    reply[#reply + 1] = math.max(maxes[i] - used[i], 0)
    reply[#reply + 1] = ttls[i]
  end
  return reply
end

local function check(apply)
  local maxes, values, ttls, limited_by = {}, {}, {}, 0
  for i = 1, #KEYS do
    local max_value, window = counter(i)
    maxes[i] = max_value
    values[i], ttls[i] = reading(KEYS[i], window)
    if limited_by == 0 and values[i] + amount > max_value then
      limited_by = i
    end
  end
  local charged = 0
  if apply and limited_by == 0 then
    charged = amount
    for i = 1, #KEYS do
      local _, window, text = counter(i)
      window_add(KEYS[i], amount, window, text)
    end
  end
  local used = {}
  for i = 1, #KEYS do
    used[i] = values[i] + charged
  end
  return answer(limited_by, maxes, used, ttls)
end

local function reserve()
  local maxes, held, ttls, limited_by = {}, {}, {}, 0
  for i = 1, #KEYS do
    local max_value, window, text = counter(i)
    local value, ends = window_add(KEYS[i], 0, window, text)
    maxes[i] = max_value
    ttls[i] = ends - now
    held[i] = value + outstanding(KEYS[i], false)
    if limited_by == 0 and held[i] + amount > max_value then
      limited_by = i
    end
  end
  local used = {}
  for i = 1, #KEYS do
    used[i] = held[i]
    if limited_by == 0 then
      used[i] = held[i] + hold
    end
  end
  if limited_by == 0 and hold > 0 then
    for i = 1, #KEYS do
      outstanding(KEYS[i], true)
      redis.call('HSET', KEYS[i], 'a:' .. hold_id, hold, 'x:' .. hold_id, now + math.min(hold_ttl, ttls[i]))
    end
  end
  return answer(limited_by, maxes, used, ttls)
end

if operation == 'check' then
  return check(false)
elseif operation == 'check_apply' then
  return check(true)
elseif operation == 'add' then
  for i = 1, #KEYS do
    local _, window, text = counter(i)
    window_add(KEYS[i], amount, window, text)
  end
  return {0}
elseif operation == 'reserve' then
  return reserve()
elseif operation == 'release' then
  local released = 0
  for i = 1, #KEYS do
    local _, ends = window_of(KEYS[i])
    local removed = redis.call('HDEL', KEYS[i], 'a:' .. hold_id, 'x:' .. hold_id)
    if removed > 0 and ends > now then
      released = 1
    end
  end
  return {released}
end
return redis.error_reply('held_window.lua: unknown operation ' .. tostring(operation))
