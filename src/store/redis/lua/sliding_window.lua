-- Part 3: sliding window counter (core::algorithm::sliding_window): the count of the current
-- epoch-aligned window plus the previous window's count weighted by how much of it still
-- overlaps the last W µs. The fractions are IEEE doubles in both languages; every expression
-- below is evaluated in the same order as in Rust, so both give the same bits.
--
--   start    = now − (now mod⁺ W); the stored (start, previous, current) becomes
--              stored start = start      → as stored
--              stored start = start − W  → (start, stored current, 0)
--              stored start > start      → as stored (the clock went back: no free capacity)
--              otherwise                 → (start, 0, 0)
--   elapsed  = clamp(now − start, 0, W)
--   weight   = (W − elapsed) / W
--   estimate = previous · weight + current
--   admit    ⇔ estimate + n ≤ L
--   charge   : current' = min(current + n, 2^32 − 1)   (only recorded refused hits reach it)
--   remaining   = clamp(floor(L − estimate), 0, L), estimate taken after the commit
--   reset_after = current > 0 ? (start + W − now) + W : previous > 0 ? start + W − now : 0
--   retry_after: the first µs at which the hits fit, while `previous` decays (or, when
--     current + n > L, while `current` decays as the next window's previous):
--       decay(count, room) = count = 0 ? 0 : allowance ≥ W ? 0 : W − floor(allowance),
--         allowance = room · W / count
--       current + n ≤ L → guess = start + decay(previous, L − current − n)
--       otherwise       → guess = start + W + decay(current, L − n)
--     then nudged to the first µs the admission test itself accepts: up to 4 times +1 µs
--     while the hits do not fit, then up to 4 times −1 µs while they fit 1 µs earlier.
--       retry_after = at − now;  n > L → reset_after;  always at least 1
--   expires_at = start + 2W
--
-- State: "S <expires_at> <window_start> <previous> <current>", { expires_at, window_start,
-- previous, current } here.

-- Defined on first use (see decide.lua). The methods are the branches of one function (see
-- the cost note in prelude.lua), each naming its arguments.
local function define_sliding_window()
  -- How far (in µs, each way) a retry guess is nudged to agree with the admission test.
  local SLIDING_WINDOW_MAX_NUDGES = 4

  -- The windows looked at (Rust's `Windows`), set by 'at'.
  local limit, now, start, length, previous, current

  -- The stored windows as seen from the window starting at `current_start`.
  local function carried_over(stored_start, stored_previous, stored_current, current_start)
    if stored_start >= current_start then
      return stored_start, stored_previous, stored_current
    elseif stored_start == current_start - length then
      return current_start, stored_current, 0
    end
    return current_start, 0, 0
  end

  -- Rust's `estimate` (with `previous_weight`) of windows (window_start, with_previous,
  -- with_current) seen at `at`: the windows looked at, or those seen at another instant.
  local function estimate_of(at, window_start, with_previous, with_current)
    local elapsed = math.min(math.max(at - window_start, 0), length)
    return with_previous * ((length - elapsed) / length) + with_current
  end

  -- Whether `hits` fit in the windows looked at, seen at `at` with no hits in between (Rust's
  -- `seen_at(at).fits(hits)`).
  local function fits_at(at, hits)
    local at_start, at_previous, at_current =
      carried_over(start, previous, current, epoch_window_start(at, length))
    return estimate_of(at, at_start, at_previous, at_current) + hits <= limit
  end

  local function reset_after()
    local until_end = math.max(start + length - now, 0)
    if current > 0 then
      return until_end + length
    elseif previous > 0 then
      return until_end
    end
    return 0
  end

  -- Time into a window until `count` hits of the window before it, weighted by their remaining
  -- overlap, take at most `room`.
  local function decay_time(count, room)
    if count == 0 then
      return 0
    end
    local allowance = room * length / count
    if allowance >= length then
      return 0
    end
    return length - math.floor(allowance)
  end

  return function(method, a, b, c, d, e)
    if method == 'at' then
      local quota_limit, window, state, at_now = a, b, d, e
      limit, now, length = quota_limit, at_now, math.max(window, 1)
      local current_start = epoch_window_start(now, length)
      start, previous, current = current_start, 0, 0
      if state then
        start, previous, current = carried_over(state[2], state[3], state[4], current_start)
      end
    elseif method == 'fits' then
      local hits = a
      return estimate_of(now, start, previous, current) + hits <= limit
    elseif method == 'charge' then
      -- Refused hits recorded may pass the limit: core::algorithm::MAX_RECORDED_COUNT.
      local hits = a
      current = math.min(current + hits, 4294967295)
    elseif method == 'refund' then
      local hits = a
      local from_current = math.min(hits, current)
      previous = math.max(previous - (hits - from_current), 0)
      current = current - from_current
    elseif method == 'snapshot' then
      local room = math.floor(limit - estimate_of(now, start, previous, current))
      return math.min(math.max(room, 0), limit), reset_after()
    elseif method == 'retry_after' then
      local hits = a
      if hits > limit then
        return reset_after()
      end
      local room = limit - (current + hits)
      local guess
      if room >= 0 then
        guess = start + decay_time(previous, room)
      else
        guess = start + length + decay_time(current, limit - hits)
      end
      -- Rust's first_fit_near: the first µs near `guess` at which the admission test
      -- accepts the hits.
      local at = guess
      for _ = 1, SLIDING_WINDOW_MAX_NUDGES do
        if fits_at(at, hits) then
          break
        end
        at = at + 1
      end
      for _ = 1, SLIDING_WINDOW_MAX_NUDGES do
        if not fits_at(at - 1, hits) then
          break
        end
        at = at - 1
      end
      return at - now
    elseif method == 'state' then
      -- expires_at = window end + W. Into the table `into` when given.
      local into = a
      if into then
        into[1], into[2], into[3], into[4] = start + length + length, start, previous, current
        return into
      end
      return { start + length + length, start, previous, current }
    elseif method == 'load' then
      local key, load_now = a, b
      return load_state(key, '^S (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$', load_now)
    elseif method == 'write' then
      local key, state, ttl_ms = a, b, c
      write_state(key, 'S %d %d %d %d', state, ttl_ms)
    end
  end
end
