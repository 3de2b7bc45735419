-- Part 2: fixed window (core::arithmetic::algorithm::fixed_window), counted as envoyproxy/ratelimit
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
-- State: "F <expires_at> <window_start> <count>" (its pattern and format in prelude.lua),
-- { expires_at, window_start, count } here.

-- Defined on first use (see decide.lua). The methods are the branches of one function (see
-- the cost note in prelude.lua), each naming its arguments.
local function define_fixed_window()
  -- The window looked at (Rust's `Window`), set by 'at'.
  local limit, now, start, stop, count

  -- Looks at the window holding `at_now`, given the stored window's start and count (nil:
  -- none).
  local function look_at(quota_limit, window, stored_start, stored_count, at_now)
    limit, now = quota_limit, at_now
    start, stop = window_span(now, window)
    count = 0
    if stored_start == start then
      count = stored_count
    elseif stored_start and stored_start > start then
      start, stop = window_span(stored_start, window)
      count = stored_count
    end
  end

  return function(method, a, b, c, d, e, f, g, h, i)
    if method == 'at' then
      local quota_limit, window, state, at_now = a, b, d, e
      if state then
        look_at(quota_limit, window, state[2], state[3], at_now)
      else
        look_at(quota_limit, window, nil, nil, at_now)
      end
    elseif method == 'charge_alone' then
      -- A request of this one counter charging `hits` (`asked` with its class's reserve),
      -- decided and written in one go (a window has no use for the quota's capacity, the
      -- buckets' argument): what 'load', 'at', evaluate_counter's charge, 'state'
      -- and 'write' do for it, without their calls and the state's table, which cost Redis
      -- about a fifth of such a decision in a batch (the default algorithm's common case;
      -- see decide_lone_counter). `may_keep_ttl`: whether a write may keep the key's TTL
      -- when the window's end is the stored one's (decide.lua's keeps_ttl). Returns
      -- admitted, then remaining, reset_after (after the charge if admitted) and
      -- retry_after.
      local key, quota_limit, window, hits, asked, at_now, extra_ttl_ms, may_keep_ttl =
        a, b, c, e, f, g, h, i
      local stored_expiry, stored_start, stored_count =
        read_record(key, FIXED_WINDOW_PATTERN, at_now)
      look_at(quota_limit, window, stored_start, stored_count, at_now)
      -- The window holds now, so its end is ahead: reset_after and retry_after are at least
      -- 1 µs and the TTL is positive (always a write).
      local reset_after = stop - now
      if count + asked > limit then
        return false, math.max(limit - count, 0), reset_after, reset_after
      end
      count = math.min(count + hits, 4294967295)
      write_record(key, string.format(FIXED_WINDOW_FORMAT, stop, start, count),
        math.ceil(reset_after / 1000) + extra_ttl_ms, may_keep_ttl and stop == stored_expiry)
      return true, math.max(limit - count, 0), reset_after, 0
    elseif method == 'fits' then
      local hits = a
      return count + hits <= limit
    elseif method == 'charge' then
      -- Refused hits recorded may pass the limit: core::arithmetic::algorithm::MAX_RECORDED_COUNT.
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
      return load_state(key, FIXED_WINDOW_PATTERN, load_now)
    elseif method == 'write' then
      local key, state, ttl_ms, keep_ttl = a, b, c, d
      write_state(key, FIXED_WINDOW_FORMAT, state, ttl_ms, keep_ttl)
    end
  end
end
