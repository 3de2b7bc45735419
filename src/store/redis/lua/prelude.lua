-- floodgate's decision script, part 1 of 6: what every algorithm shares. The script is this
-- file, one file per algorithm and decide.lua, joined in that order (src/store/redis/script.rs).
-- Each part mirrors a file of src/core; keep them in step. Each algorithm file defines one
-- function that builds the algorithm when a request first needs it (see decide.lua).
--
-- Numbers: Lua numbers are doubles, exact for integers up to 2^53. The store refuses quotas that
-- could carry an integer past that (script.rs, `check_quota`), so the integer arithmetic here is
-- exact, and the sliding window's fractions use the same IEEE operations in the same order as
-- the Rust core. Numbers are written with string.format('%d'): Lua's default conversion keeps
-- only 14 significant digits (1.8e15 µs would lose its last two).
--
-- Cost: Redis CPU per decision is what every floodgate instance shares, and Redis runs the
-- script's whole top level at every call: every function in it is made anew (a closure), with
-- every local variable it uses from outside (an upvalue), and so is every table. Each costs
-- Redis about 50–100 ns, counting the garbage collection Redis steps every 50 calls — as much
-- as the arithmetic of a decision. So the script makes few: an algorithm is one function whose
-- methods are its branches, the counter it looks at lives in locals rather than a table,
-- numbers travel as multiple values, a stored record is read with one string.match and
-- written with one string.format, and library functions are called as math.max rather than
-- through local aliases (each alias a function uses is one more upvalue per call).

-- The windows' stored records (fixed_window.lua and sliding_window.lua say what each field
-- is), here because the hybrid store's sync script (hybrid_sync.lua, after this file) reads
-- and writes the same records.
local FIXED_WINDOW_PATTERN = '^F (%-?%d+) (%-?%d+) (%-?%d+)$'
local FIXED_WINDOW_FORMAT = 'F %d %d %d'
local SLIDING_WINDOW_PATTERN = '^S (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$'
local SLIDING_WINDOW_FORMAT = 'S %d %d %d %d'

-- The number a decimal string holds (tonumber). In a batch (ARGV[1], the request count, above
-- 1; see decide.lua) each string is parsed once per call: most recur from request to request
-- (limits, windows, hits, key indexes, and in stored states a window's start and end), and a
-- table lookup costs a third of tonumber. A lone request parses each once anyway.
local number = tonumber
if tonumber(ARGV[1]) > 1 then
  local parsed = {}
  number = function(text)
    local value = parsed[text]
    if value == nil then
      value = tonumber(text)
      parsed[text] = value
    end
    return value
  end
end

-- 00:00:00 UTC on the 1st of month `index`, counted from January 1970 (core::ground::calendar::
-- month_start): Hinnant's days_from_civil, counted from March of year 0 so February comes
-- last; every intermediate is a small integer (exact in doubles).
local function month_start(index)
  local from_march_zero = index + 23638 -- 1970 · 12 − 2
  local march_year = math.floor(from_march_zero / 12)
  local march_month = from_march_zero - march_year * 12
  local era = math.floor(march_year / 400)
  local year_of_era = march_year - era * 400
  local day_of_era = year_of_era * 365 + math.floor(year_of_era / 4)
    - math.floor(year_of_era / 100) + math.floor((153 * march_month + 2) / 5)
  return (era * 146097 + day_of_era - 719468) * 86400000000
end

-- The window holding `now` (core::arithmetic::algorithm::window): its start and end. W > 0: windows of W µs
-- aligned to the epoch, start = now − (now mod⁺ W), Euclidean like Rust's rem_euclid; exact
-- for |now| < 2^53, where the rounding of now / W is below 1/W, so floor(now / W) never lands
-- on the wrong integer. W < 0: −W UTC calendar months counted from January 1970; the month of
-- `now` by Hinnant's civil_from_days (core::ground::calendar::month_index), whose day count is exact
-- by the same argument.
local function window_span(now, window)
  if window >= 0 then
    window = math.max(window, 1)
    local start = now - (now - math.floor(now / window) * window)
    return start, start + window
  end
  local months = -window
  local from_march_zero = math.floor(now / 86400000000) + 719468
  local era = math.floor(from_march_zero / 146097)
  local day_of_era = from_march_zero - era * 146097
  local year_of_era = math.floor((day_of_era - math.floor(day_of_era / 1460)
    + math.floor(day_of_era / 36524) - math.floor(day_of_era / 146096)) / 365)
  local day_of_year = day_of_era
    - (365 * year_of_era + math.floor(year_of_era / 4) - math.floor(year_of_era / 100))
  local march_month = math.floor((5 * day_of_year + 2) / 153)
  local index = (era * 400 + year_of_era) * 12 + march_month - 23638
  local first = index - index % months
  return month_start(first), month_start(first + months)
end

-- Stored counters. Most kinds keep a key as one string, "<tag> <expires_at> <state fields…>",
-- integers only (tag F, S or G); the sliding log keeps a hash instead (sliding_log.lua). In
-- the script a state is a table whose first element is when it expires: for the string kinds
-- the record's numbers in their stored order, { expires_at, fields… }. An algorithm `kind`
-- (see below) reads a key's state with kind('load', key, now) (nil when there is none or it
-- has expired), gives the state of the counter it looks at with kind('state', into) (filling
-- the table `into` when given, so a key's table is reused), and writes a state with
-- kind('write', key, state, ttl_ms, keep_ttl).

-- The record at `key` as numbers: expires_at, then up to three fields, from the record matched
-- by `pattern`; nil when there is no record, it is of another kind, or it has expired. Past
-- `expires_at` a state means the same as no state: the key's TTL only collects garbage, and it
-- runs on Redis's clock, which a test clock is not.
local function read_record(key, pattern, now)
  local value = redis.call('GET', key)
  if not value then
    return nil
  end
  local expires_at, first, second, third = string.match(value, pattern)
  expires_at = expires_at and number(expires_at)
  if not expires_at or expires_at <= now then
    return nil
  end
  return expires_at, number(first), number(second), third and number(third)
end

-- The state at `key`, { expires_at, fields… } (read_record's numbers), or nil.
local function load_state(key, pattern, now)
  local expires_at, first, second, third = read_record(key, pattern, now)
  return expires_at and { expires_at, first, second, third }
end

-- Writes `record`, expiring in `ttl_ms`, or when the key's TTL says if `keep_ttl` (the caller
-- knows that TTL is still the state's: decide.lua's keeps_ttl).
local function write_record(key, record, ttl_ms, keep_ttl)
  if keep_ttl then
    redis.call('SET', key, record, 'KEEPTTL')
  else
    redis.call('SET', key, record, 'PX', string.format('%d', ttl_ms))
  end
end

-- Writes `state` as the record `format` makes of its numbers (a format with fewer fields
-- ignores the rest), as write_record does.
local function write_state(key, format, state, ttl_ms, keep_ttl)
  write_record(key, string.format(format, state[1], state[2], state[3], state[4]), ttl_ms,
    keep_ttl)
end

-- How hits turn into an evaluation once an algorithm has brought a counter up to `now`
-- (core::arithmetic::algorithm::counter). An algorithm `kind` is called as kind(method, …) and holds the
-- counter it looks at (set by kind('at', …)): kind('fits', n), kind('snapshot') → remaining,
-- reset_after, kind('retry_after', n); kind('charge', n) and kind('refund', n) turn it into
-- the next counter in place (Rust's charged and refunded return a new one: the counter before
-- is needed only for its snapshot, taken first).
--   charge n that fits → admitted, next = charged(n), retry 0
--   charge n otherwise → rejected, next = current, retry = max(1, retry_after(n))
--     …when `record` (refused hits recorded, core::decision::charging): rejected, next = charged(n),
--     retry = max(1, retry_after(n)) asked of the next counter
--   check n            → admitted ⇔ fits(n): n is the check rule's asked hits (1: one more
--                        fits; 0: the count is within the limit), next = current, retry as
--                        for charge 1
--   refund n           → admitted, next = refunded(n), retry 0
-- A priority class's reserve (core::arithmetic::algorithm::share) joins the hits in fits and retry_after
-- only: fits(n + reserve), retry_after(n + reserve); n is what is charged, refunds ignore it.
-- Returns admitted, the snapshot if committed (remaining, reset_after), the snapshot if not,
-- and retry_after.
local function evaluate_counter(kind, hits_kind, hits, reserve, record)
  local change, asked, retry_asked
  if hits_kind == 'charge' or hits_kind == 'record' or hits_kind == 'record-refused' then
    change, asked = 'charge', hits + reserve
    retry_asked = asked
  elseif hits_kind == 'check' then
    asked, retry_asked = hits + reserve, 1 + reserve
  elseif hits_kind == 'refund' then
    change = 'refund'
  else
    error('floodgate: unknown hits kind ' .. tostring(hits_kind))
  end
  local remaining, reset_after = kind('snapshot')
  if asked and not kind('fits', asked) then
    if record and change == 'charge' then
      kind('charge', hits)
      local next_remaining, next_reset_after = kind('snapshot')
      return false, next_remaining, next_reset_after, remaining, reset_after,
        math.max(kind('retry_after', retry_asked), 1)
    end
    return false, remaining, reset_after, remaining, reset_after,
      math.max(kind('retry_after', retry_asked), 1)
  end
  if not change then
    return true, remaining, reset_after, remaining, reset_after, 0
  end
  -- A charge in a queueing bucket tells its wait (gcra.lua), answered where a refusal's
  -- retry goes.
  local waited = kind(change, hits) or 0
  local next_remaining, next_reset_after = kind('snapshot')
  return true, next_remaining, next_reset_after, remaining, reset_after, waited
end
