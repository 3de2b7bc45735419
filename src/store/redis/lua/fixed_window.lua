-- Part 2: fixed window (core::algorithm::fixed_window), counted as envoyproxy/ratelimit
-- counts: windows of W µs aligned to the Unix epoch, so every replica agrees where a window
-- starts, or UTC calendar months (W < 0: −W months, see window_span in prelude.lua). All
-- integer.
--
--   [start, stop) = the window holding now
--   count       = stored count if stored start ≥ start, else 0
--                 (a later stored start means the clock went back: keep that window, its end
--                 and its count rather than hand out a fresh one)
--   admit       ⇔ count + n ≤ L
--   charge      : count' = min(count + n, 2^32 − 1)   (only recorded refused hits reach it)
--   remaining   = max(0, L − count)      (L may have been lowered on reload)
--   reset_after = stop − now
--   retry_after = reset_after            (even when n > L: it never fits, but the window turns)
--   expires_at  = stop
--
-- State: "F <expires_at> <window_start> <count>", { expires_at, window_start, count } here.

-- Defined on first use (see decide.lua). The methods are the branches of one function (see
-- the cost note in prelude.lua), each naming its arguments.
local function define_fixed_window()
  -- The window looked at (Rust's `Window`), set by 'at'.
  local limit, now, start, stop, count

  return function(method, a, b, c, d, e)
    if method == 'at' then
      local quota_limit, window, state, at_now = a, b, d, e
      limit, now = quota_limit, at_now
      start, stop = window_span(now, window)
      count = 0
      if state and state[2] == start then
        count = state[3]
      elseif state and state[2] > start then
        start, stop = window_span(state[2], window)
        count = state[3]
      end
    elseif method == 'fits' then
      local hits = a
      return count + hits <= limit
    elseif method == 'charge' then
      -- Refused hits recorded may pass the limit: core::algorithm::MAX_RECORDED_COUNT.
      local hits = a
      count = math.min(count + hits, 4294967295)
    elseif method == 'refund' then
      local hits = a
      count = math.max(count - hits, 0)
    elseif method == 'snapshot' then
      return math.max(limit - count, 0), math.max(stop - now, 0)
    elseif method == 'retry_after' then -- reset_after
      return math.max(stop - now, 0)
    elseif method == 'state' then
      -- Into the table `into` when given.
      local into = a
      if into then
        into[1], into[2], into[3] = stop, start, count
        return into
      end
      return { stop, start, count }
    elseif method == 'load' then
      local key, load_now = a, b
      return load_state(key, '^F (%-?%d+) (%-?%d+) (%-?%d+)$', load_now)
    elseif method == 'write' then
      local key, state, ttl_ms, keep_ttl = a, b, c, d
      write_state(key, 'F %d %d %d', state, ttl_ms, keep_ttl)
    end
  end
end
