-- floodgate's ban script: the ban records of `ban:` rules (core::arithmetic::ban), one call per
-- request, atomic as every script. Keep it in step with core/src/arithmetic/ban.rs: the
-- differential test (tests/redis/redis_bans.rs) demands the same outcomes from both.
--
--   check   : banned_for = until − now when until > now, else 0; nothing changes
--   strike  : banned now → nothing changes; else strikes restart at now when none are counted
--             or since + within ≤ now; strikes + 1; at `after`: until = now + length, length =
--             ban_for doubled `level` times (each step capped at max), level + 1 (at most
--             MAX_LEVEL), strikes = 0, banned_for = length
--   lift    : the record is deleted
--   expires : max(since + within while strikes are counted, until + max once banned); a
--             record that means nothing from now on is deleted
--
-- Record: "B <expires_at> <strikes> <since> <level> <until>", integers (µs), with a TTL of
-- expires_at − now (plus ARGV[2] ms: a test clock's instants are not Redis's).
-- KEYS: one per call. ARGV[1]: now in µs, or 'time' for Redis TIME; ARGV[2]: extra TTL in
-- ms; then per call CALL_FIELDS values: action ('check', 'strike' or 'lift'), after, within,
-- ban_for, max (µs).
-- Reply: per call banned_for (µs), strikes, level.
--
-- Every number stays below 2^53 (max ≤ 7 days, now < 2^52): exact in doubles.

local CALL_FIELDS = 5
local MAX_LEVEL = 40
local PATTERN = '^B (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$'

-- `now` and `extra_ttl_ms`: clock.lua, joined before this file.

-- The record at `key`: strikes, since, level, until (zeros when none or expired).
local function load(key)
  local value = redis.call('GET', key)
  if value then
    local expires_at, strikes, since, level, untill = string.match(value, PATTERN)
    if expires_at and tonumber(expires_at) > now then
      return tonumber(strikes), tonumber(since), tonumber(level), tonumber(untill)
    end
  end
  return 0, 0, 0, 0
end

-- Writes the record, or deletes it when it means nothing from now on.
local function store(key, within, max, strikes, since, level, untill)
  local counting, remembered = 0, 0
  if strikes > 0 then
    counting = since + within
  end
  if level > 0 then
    remembered = untill + max
  end
  local expires_at = math.max(counting, remembered)
  if expires_at <= now then
    redis.call('UNLINK', key)
    return
  end
  local ttl_ms = math.ceil((expires_at - now) / 1000) + extra_ttl_ms
  redis.call('SET', key, string.format('B %d %d %d %d %d', expires_at, strikes, since, level,
    untill), 'PX', string.format('%d', ttl_ms))
end

-- ban_for doubled `level` times, each step capped at max.
local function ban_length(ban_for, max, level)
  local length = math.min(ban_for, max)
  for _ = 1, level do
    length = math.min(length * 2, max)
  end
  return length
end

local reply = {}
for index = 1, #KEYS do
  local base = 2 + (index - 1) * CALL_FIELDS
  local key = KEYS[index]
  local action = ARGV[base + 1]
  local after, within = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  local ban_for, max = tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5])
  local strikes, since, level, untill = load(key)
  local banned_for = math.max(untill - now, 0)
  if action == 'lift' then
    redis.call('UNLINK', key)
    banned_for, strikes, level = 0, 0, 0
  elseif action == 'strike' and banned_for == 0 then
    if strikes == 0 or since + within <= now then
      strikes, since = 0, now
    end
    strikes = strikes + 1
    if strikes >= after then
      banned_for = ban_length(ban_for, max, level)
      untill = now + banned_for
      level = math.min(level + 1, MAX_LEVEL)
      strikes = 0
    end
    store(key, within, max, strikes, since, level, untill)
  elseif action ~= 'check' and action ~= 'strike' then
    error('floodgate: unknown ban action ' .. tostring(action))
  end
  reply[#reply + 1] = banned_for
  reply[#reply + 1] = strikes
  reply[#reply + 1] = level
end
return reply
