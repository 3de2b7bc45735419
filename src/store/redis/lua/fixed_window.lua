-- Part 2: fixed window (core::algorithm::fixed_window), counted as envoyproxy/ratelimit
-- counts: windows of W µs aligned to the Unix epoch, so every replica agrees where a window
-- starts. All integer.
--
--   start       = now − (now mod⁺ W)
--   count       = stored count if stored start ≥ start, else 0
--                 (a later stored start means the clock went back: keep that window and its
--                 count rather than hand out a fresh one)
--   admit       ⇔ count + n ≤ L
--   charge      : count' = min(count + n, 2^32 − 1)   (only recorded refused hits reach it)
--   remaining   = max(0, L − count)      (L may have been lowered on reload)
--   reset_after = start + W − now
--   retry_after = reset_after            (even when n > L: it never fits, but the window turns)
--   expires_at  = start + W
--
-- State: "F <expires_at> <window_start> <count>", { expires_at, window_start, count } here.

-- Defined on first use (see decide.lua). The methods are the branches of one function (see
-- the cost note in prelude.lua), each naming its arguments.
local function define_fixed_window()
  -- The window looked at (Rust's `Window`), set by 'at'.
  local limit, now, start, length, count

  return function(method, a, b, c, d, e)
    if method == 'at' then
      local quota_limit, window, state, at_now = a, b, d, e
      limit, now, length = quota_limit, at_now, math.max(window, 1)
      start, count = epoch_window_start(now, length), 0
      if state and state[2] >= start then
        start, count = state[2], state[3]
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
      return math.max(limit - count, 0), math.max(start + length - now, 0)
    elseif method == 'retry_after' then -- reset_after
      return math.max(start + length - now, 0)
    elseif method == 'state' then
      -- Into the table `into` when given.
      local into = a
      if into then
        into[1], into[2], into[3] = start + length, start, count
        return into
      end
      return { start + length, start, count }
    elseif method == 'load' then
      local key, load_now = a, b
      return load_state(key, '^F (%-?%d+) (%-?%d+) (%-?%d+)$', load_now)
    elseif method == 'write' then
      local key, state, ttl_ms = a, b, c
      write_state(key, 'F %d %d %d', state, ttl_ms)
    end
  end
end
