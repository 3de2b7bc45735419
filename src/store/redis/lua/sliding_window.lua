-- Part 3: sliding window counter (core::arithmetic::algorithm::sliding_window): the count of the current
-- window plus the previous window's count weighted by how much of it still overlaps the last
-- window's length. Windows are epoch-aligned W µs, or UTC calendar months (W < 0: −W months,
-- see window_span in prelude.lua), where W below is the length of the month looked at. The
-- fractions are IEEE doubles in both languages; every expression below is evaluated in the
-- same order as in Rust, so both give the same bits.
--
--   [start, stop) = the window holding now, W = stop − start; [start', start) the one before;
--              the stored (start, previous, current) becomes
--              stored start = start      → as stored
--              stored start = start'     → (start, stored current, 0)
--              stored start > start      → as stored, in the window starting there (the clock
--                                          went back: no free capacity)
--              otherwise                 → (start, 0, 0)
--   elapsed  = clamp(now − start, 0, W)
--   weight   = (W − elapsed) / W
--   estimate = previous · weight + current
--   admit    ⇔ estimate + n ≤ L
--   charge   : current' = min(current + n, 2^32 − 1)   (only recorded refused hits reach it)
--   remaining   = clamp(floor(L − estimate), 0, L), estimate taken after the commit
--   W⁺ = the length of the window after [start, stop)
--   reset_after = current > 0 ? (stop − now) + W⁺ : previous > 0 ? stop − now : 0
--   retry_after: the first µs at which the hits fit, while `previous` decays (or, when
--     current + n > L, while `current` decays as the next window's previous):
--       decay(count, room, W) = count = 0 ? 0 : allowance ≥ W ? 0 : W − floor(allowance),
--         allowance = room · W / count
--       current + n ≤ L → guess = start + decay(previous, L − current − n, W)
--       otherwise       → guess = stop + decay(current, L − n, W⁺)
--     then nudged to the first µs the admission test itself accepts: up to 4 times +1 µs
--     while the hits do not fit, then up to 4 times −1 µs while they fit 1 µs earlier (the
--     test at an instant sees the windows of that instant).
--       retry_after = at − now;  n > L → reset_after;  always at least 1
--   expires_at = end of the window after [start, stop)
--
-- State: "S <expires_at> <window_start> <previous> <current>" (its pattern and format in
-- prelude.lua), { expires_at, window_start, previous, current } here.

-- Defined on first use (see decide.lua). The methods are the branches of one function (see
-- the cost note in prelude.lua), each naming its arguments.
local function define_sliding_window()
  -- How far (in µs, each way) a retry guess is nudged to agree with the admission test.
  local SLIDING_WINDOW_MAX_NUDGES = 4

  -- The windows looked at (Rust's `Windows`), set by 'at': the quota's W argument, and the
  -- current window [start, stop) with its counts.
  local limit, now, window, start, stop, previous, current

  -- The stored windows as seen from the window [here_start, here_stop): start, stop, previous,
  -- current.
  local function carried_over(stored_start, stored_previous, stored_current, here_start,
                              here_stop)
    if stored_start == here_start then
      return here_start, here_stop, stored_previous, stored_current
    elseif stored_start > here_start then
      local stored_window_start, stored_stop = window_span(stored_start, window)
      return stored_window_start, stored_stop, stored_previous, stored_current
    elseif stored_start == window_span(here_start - 1, window) then
      return here_start, here_stop, stored_current, 0
    end
    return here_start, here_stop, 0, 0
  end

  -- Rust's `estimate` (with `previous_weight`) of windows [window_start, window_stop) with
  -- (with_previous, with_current) seen at `at`: the windows looked at, or those seen at
  -- another instant.
  local function estimate_of(at, window_start, window_stop, with_previous, with_current)
    local length = math.max(window_stop - window_start, 1)
    local elapsed = math.min(math.max(at - window_start, 0), length)
    return with_previous * ((length - elapsed) / length) + with_current
  end

  -- Whether `hits` fit in the windows looked at, seen at `at` with no hits in between (Rust's
  -- `seen_at(at).fits(hits)`).
  local function fits_at(at, hits)
    local here_start, here_stop = window_span(at, window)
    local at_start, at_stop, at_previous, at_current =
      carried_over(start, previous, current, here_start, here_stop)
    return estimate_of(at, at_start, at_stop, at_previous, at_current) + hits <= limit
  end

  -- The length of the window after the current one.
  local function next_length()
    local next_start, next_stop = window_span(stop, window)
    return next_stop - next_start
  end

  local function reset_after()
    local until_end = math.max(stop - now, 0)
    if current > 0 then
      return until_end + next_length()
    elseif previous > 0 then
      return until_end
    end
    return 0
  end

  -- Time into a window of `length` µs until `count` hits of the window before it, weighted by
  -- their remaining overlap, take at most `room`.
  local function decay_time(count, room, length)
    if count == 0 then
      return 0
    end
    length = math.max(length, 1)
    local allowance = room * length / count
    if allowance >= length then
      return 0
    end
    return length - math.floor(allowance)
  end

  -- Looks at the windows holding `at_now`, given the stored start and counts (nil: none).
  local function look_at(quota_limit, quota_window, stored_start, stored_previous,
                         stored_current, at_now)
    limit, now, window = quota_limit, at_now, quota_window
    start, stop = window_span(now, window)
    previous, current = 0, 0
    if stored_start then
      start, stop, previous, current =
        carried_over(stored_start, stored_previous, stored_current, start, stop)
    end
  end

  local function snapshot()
    local room = math.floor(limit - estimate_of(now, start, stop, previous, current))
    return math.min(math.max(room, 0), limit), reset_after()
  end

  local function retry_after(hits)
    if hits > limit then
      return reset_after()
    end
    local room = limit - (current + hits)
    local guess
    if room >= 0 then
      guess = start + decay_time(previous, room, stop - start)
    else
      guess = stop + decay_time(current, limit - hits, next_length())
    end
    -- Rust's first_fit_near: the first µs near `guess` at which the admission test accepts
    -- the hits.
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
  end

  return function(method, a, b, c, d, e, f, g, h, i)
    if method == 'at' then
      local quota_limit, quota_window, state, at_now = a, b, d, e
      if state then
        look_at(quota_limit, quota_window, state[2], state[3], state[4], at_now)
      else
        look_at(quota_limit, quota_window, nil, nil, nil, at_now)
      end
    elseif method == 'charge_alone' then
      -- A request of this one counter charging `hits` (`asked` with its class's reserve),
      -- decided and written in one go, as the fixed window's 'charge_alone' (see there).
      local key, quota_limit, quota_window, hits, asked, at_now, extra_ttl_ms, may_keep_ttl =
        a, b, c, e, f, g, h, i
      local stored_expiry, stored_start, stored_previous, stored_current =
        read_record(key, SLIDING_WINDOW_PATTERN, at_now)
      look_at(quota_limit, quota_window, stored_start, stored_previous, stored_current, at_now)
      if estimate_of(now, start, stop, previous, current) + asked > limit then
        local remaining, until_reset = snapshot()
        return false, remaining, until_reset, math.max(retry_after(asked), 1)
      end
      current = math.min(current + hits, 4294967295)
      -- Its expiry, the end of the window after this one, is ahead of now: always a write.
      local _, expires_at = window_span(stop, window)
      write_record(key,
        string.format(SLIDING_WINDOW_FORMAT, expires_at, start, previous, current),
        math.ceil((expires_at - now) / 1000) + extra_ttl_ms,
        may_keep_ttl and expires_at == stored_expiry)
      local remaining, until_reset = snapshot()
      return true, remaining, until_reset, 0
    elseif method == 'fits' then
      local hits = a
      return estimate_of(now, start, stop, previous, current) + hits <= limit
    elseif method == 'charge' then
      -- Refused hits recorded may pass the limit: core::arithmetic::algorithm::MAX_RECORDED_COUNT.
      local hits = a
      current = math.min(current + hits, 4294967295)
    elseif method == 'refund' then
      local hits = a
      local from_current = math.min(hits, current)
      previous = math.max(previous - (hits - from_current), 0)
      current = current - from_current
    elseif method == 'snapshot' then
      return snapshot()
    elseif method == 'retry_after' then
      local hits = a
      return retry_after(hits)
    elseif method == 'state' then
      -- expires_at = the end of the window after this one. Into the table `into` when given.
      local into = a
      local _, expires_at = window_span(stop, window)
      if into then
        into[1], into[2], into[3], into[4] = expires_at, start, previous, current
        return into
      end
      return { expires_at, start, previous, current }
    elseif method == 'load' then
      local key, load_now = a, b
      return load_state(key, SLIDING_WINDOW_PATTERN, load_now)
    elseif method == 'write' then
      local key, state, ttl_ms, keep_ttl = a, b, c, d
      write_state(key, SLIDING_WINDOW_FORMAT, state, ttl_ms, keep_ttl)
    end
  end
end
