-- Part 2: fixed window (core::algorithm::fixed_window), counted as envoyproxy/ratelimit
-- counts: windows of W µs aligned to the Unix epoch, so every replica agrees where a window
-- starts. All integer.
--
--   start       = now − (now mod⁺ W)
--   count       = stored count if stored start ≥ start, else 0
--                 (a later stored start means the clock went back: keep that window and its
--                 count rather than hand out a fresh one)
--   admit       ⇔ count + n ≤ L
--   remaining   = max(0, L − count)      (L may have been lowered on reload)
--   reset_after = start + W − now
--   retry_after = reset_after            (even when n > L: it never fits, but the window turns)
--   expires_at  = start + W

-- Defined on first use (see decide.lua).
local function define_fixed_window()
  local FixedWindow = {}
  FixedWindow.__index = FixedWindow
  FixedWindow.storage = STRING_STORAGE

  STATE_DECODERS.F = function(fields)
    return { tag = 'F', window_start = tonumber(fields[3]), count = tonumber(fields[4]) }
  end

  STATE_ENCODERS.F = function(state)
    return { state.window_start, state.count }
  end

  local function fixed_window(limit, now, start, length, count)
    return setmetatable(
      { limit = limit, now = now, start = start, length = length, count = count },
      FixedWindow
    )
  end

  function FixedWindow.at(quota, state, now)
    local length = max(quota.window, 1)
    local start, count = epoch_window_start(now, length), 0
    if state and state.tag == 'F' and state.window_start >= start then
      start, count = state.window_start, state.count
    end
    return fixed_window(quota.limit, now, start, length, count)
  end

  function FixedWindow:with_count(count)
    return fixed_window(self.limit, self.now, self.start, self.length, count)
  end

  function FixedWindow:reset_after()
    return max(self.start + self.length - self.now, 0)
  end

  function FixedWindow:fits(hits)
    return self.count + hits <= self.limit
  end

  function FixedWindow:charged(hits)
    return self:with_count(self.count + hits)
  end

  function FixedWindow:refunded(hits)
    return self:with_count(max(self.count - hits, 0))
  end

  function FixedWindow:snapshot()
    return max(self.limit - self.count, 0), self:reset_after()
  end

  function FixedWindow:retry_after(_hits)
    return self:reset_after()
  end

  function FixedWindow:expires_at()
    return self.start + self.length
  end

  function FixedWindow:state()
    return { tag = 'F', window_start = self.start, count = self.count }
  end

  return FixedWindow
end
