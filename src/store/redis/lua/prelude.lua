-- floodgate's decision script, part 1 of 6: what every algorithm shares. The script is this
-- file, one file per algorithm and decide.lua, joined in that order (src/store/redis/script.rs).
-- Each part mirrors a file of src/core; keep them in step. Each algorithm file defines one
-- function that builds the algorithm's class when a request first needs it (see decide.lua).
--
-- Numbers: Lua numbers are doubles, exact for integers up to 2^53. The store refuses quotas that
-- could carry an integer past that (script.rs, `check_quota`), so the integer arithmetic here is
-- exact, and the sliding window's fractions use the same IEEE operations in the same order as
-- the Rust core. Numbers are written with string.format('%d'): Lua's default conversion keeps
-- only 14 significant digits (1.8e15 µs would lose its last two).

local floor = math.floor
local max = math.max
local min = math.min

-- a mod⁺ b, Euclidean (b > 0), like Rust's rem_euclid. Exact for |a| < 2^53: the rounding of
-- a / b is below 1/b, so floor(a / b) never lands on the wrong integer.
local function mod_euclid(a, b)
  return a - floor(a / b) * b
end

-- Start of the epoch-aligned window holding `now` (core::algorithm::fixed_window).
local function epoch_window_start(now, window)
  return now - mod_euclid(now, max(window, 1))
end

-- Stored counters. Most kinds keep a key as one string, "<tag> <expires_at> <state fields…>",
-- integers only; each registers how its state reads and writes (tag F, S or G). The sliding
-- log keeps a hash instead (sliding_log.lua). A kind's `storage` loads a key's state (nil when
-- there is none or it has expired) and writes a state with its TTL.
local STATE_DECODERS = {}
local STATE_ENCODERS = {}

local function format_integer(number)
  return string.format('%d', number)
end

-- The state in `value` (a GET reply: false when the key is missing), or nil when there is
-- none or it has expired. Past `expires_at` a state means the same as no state: the key's TTL
-- only collects garbage, and it runs on Redis's clock, which a test clock is not.
local function decode_stored(value, now)
  if not value then
    return nil
  end
  local fields = {}
  for token in string.gmatch(value, '%S+') do
    fields[#fields + 1] = token
  end
  local decoder = STATE_DECODERS[fields[1]]
  local expires_at = tonumber(fields[2])
  if not decoder or not expires_at or expires_at <= now then
    return nil
  end
  return decoder(fields)
end

local function encode_stored(state, expires_at)
  local numbers = STATE_ENCODERS[state.tag](state)
  local words = { state.tag, format_integer(expires_at) }
  for index = 1, #numbers do
    words[index + 2] = format_integer(numbers[index])
  end
  return table.concat(words, ' ')
end

local STRING_STORAGE = {
  load = function(key, now)
    return decode_stored(redis.call('GET', key), now)
  end,
  write = function(key, state, expires_at, ttl_ms)
    redis.call('SET', key, encode_stored(state, expires_at), 'PX', format_integer(ttl_ms))
  end,
}

-- How hits turn into an evaluation once an algorithm has brought a counter up to `now`
-- (core::algorithm::counter). A counter answers fits, charged, refunded, snapshot (remaining,
-- reset_after), retry_after, expires_at and state.
--   charge n that fits → admitted, next = charged(n), retry 0
--   charge n otherwise → rejected, next = current, retry = max(1, retry_after(n))
--   check              → admitted ⇔ fits(1), next = current, retry as for charge 1
--   refund n           → admitted, next = refunded(n), retry 0
-- A priority class's reserve (core::algorithm::share) joins the hits in fits and retry_after
-- only: fits(n + reserve), retry_after(n + reserve); n is what is charged, refunds ignore it.
local function commit(before, next)
  local before_remaining, before_reset_after = before:snapshot()
  local remaining, reset_after = next:snapshot()
  return {
    admitted = true,
    committed = { remaining, reset_after },
    uncommitted = { before_remaining, before_reset_after },
    retry_after = 0,
    expires_at = next:expires_at(),
    next_state = next:state(),
  }
end

local function unchanged(counter, admitted, retry_after)
  local remaining, reset_after = counter:snapshot()
  local snapshot = { remaining, reset_after }
  return {
    admitted = admitted,
    committed = snapshot,
    uncommitted = snapshot,
    retry_after = admitted and 0 or max(retry_after, 1),
    expires_at = counter:expires_at(),
    next_state = counter:state(),
  }
end

local function evaluate_counter(counter, kind, hits, reserve)
  if kind == 'charge' then
    if counter:fits(hits + reserve) then
      return commit(counter, counter:charged(hits))
    end
    return unchanged(counter, false, counter:retry_after(hits + reserve))
  elseif kind == 'check' then
    if counter:fits(1 + reserve) then
      return unchanged(counter, true, 0)
    end
    return unchanged(counter, false, counter:retry_after(1 + reserve))
  elseif kind == 'refund' then
    return commit(counter, counter:refunded(hits))
  end
  error('floodgate: unknown hits kind ' .. tostring(kind))
end
