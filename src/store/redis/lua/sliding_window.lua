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

-- Defined on first use (see decide.lua).
local function define_sliding_window()
  local SlidingWindow = {}
  SlidingWindow.__index = SlidingWindow
  SlidingWindow.storage = STRING_STORAGE

  -- How far (in µs, each way) a retry guess is nudged to agree with the admission test.
  local SLIDING_WINDOW_MAX_NUDGES = 4

  STATE_DECODERS.S = function(fields)
    return {
      tag = 'S',
      window_start = tonumber(fields[3]),
      previous = tonumber(fields[4]),
      current = tonumber(fields[5]),
    }
  end

  STATE_ENCODERS.S = function(state)
    return { state.window_start, state.previous, state.current }
  end

  local function sliding_window(limit, now, start, length, previous, current)
    return setmetatable({
      limit = limit,
      now = now,
      start = start,
      length = length,
      previous = previous,
      current = current,
    }, SlidingWindow)
  end

  -- The stored windows as seen from the window starting at `current_start`.
  local function carried_over(stored_start, previous, current, current_start, length)
    if stored_start >= current_start then
      return stored_start, previous, current
    elseif stored_start == current_start - length then
      return current_start, current, 0
    end
    return current_start, 0, 0
  end

  -- Time into a window until `count` hits of the window before it, weighted by their remaining
  -- overlap, take at most `room`.
  local function decay_time(count, room, length)
    if count == 0 then
      return 0
    end
    local allowance = room * length / count
    if allowance >= length then
      return 0
    end
    return length - floor(allowance)
  end

  function SlidingWindow.at(quota, state, now)
    local length = max(quota.window, 1)
    local current_start = epoch_window_start(now, length)
    local start, previous, current = current_start, 0, 0
    if state and state.tag == 'S' then
      start, previous, current =
        carried_over(state.window_start, state.previous, state.current, current_start, length)
    end
    return sliding_window(quota.limit, now, start, length, previous, current)
  end

  -- The same counter seen at another instant, with no hits in between.
  function SlidingWindow:seen_at(now)
    local start, previous, current = carried_over(
      self.start,
      self.previous,
      self.current,
      epoch_window_start(now, self.length),
      self.length
    )
    return sliding_window(self.limit, now, start, self.length, previous, current)
  end

  function SlidingWindow:fits_at(now, hits)
    return self:seen_at(now):fits(hits)
  end

  -- The first µs near `guess` at which the admission test accepts `hits`.
  function SlidingWindow:first_fit_near(guess, hits)
    local at = guess
    for _ = 1, SLIDING_WINDOW_MAX_NUDGES do
      if self:fits_at(at, hits) then
        break
      end
      at = at + 1
    end
    for _ = 1, SLIDING_WINDOW_MAX_NUDGES do
      if not self:fits_at(at - 1, hits) then
        break
      end
      at = at - 1
    end
    return at
  end

  function SlidingWindow:window_end()
    return self.start + self.length
  end

  function SlidingWindow:previous_weight()
    local elapsed = min(max(self.now - self.start, 0), self.length)
    return (self.length - elapsed) / self.length
  end

  function SlidingWindow:estimate()
    return self.previous * self:previous_weight() + self.current
  end

  function SlidingWindow:reset_after()
    local until_end = max(self:window_end() - self.now, 0)
    if self.current > 0 then
      return until_end + self.length
    elseif self.previous > 0 then
      return until_end
    end
    return 0
  end

  function SlidingWindow:fits(hits)
    return self:estimate() + hits <= self.limit
  end

  function SlidingWindow:charged(hits)
    return sliding_window(
      self.limit, self.now, self.start, self.length, self.previous, self.current + hits
    )
  end

  function SlidingWindow:refunded(hits)
    local from_current = min(hits, self.current)
    return sliding_window(
      self.limit,
      self.now,
      self.start,
      self.length,
      max(self.previous - (hits - from_current), 0),
      self.current - from_current
    )
  end

  function SlidingWindow:snapshot()
    local room = floor(self.limit - self:estimate())
    return min(max(room, 0), self.limit), self:reset_after()
  end

  function SlidingWindow:retry_after(hits)
    if hits > self.limit then
      return self:reset_after()
    end
    local room = self.limit - (self.current + hits)
    local guess
    if room >= 0 then
      guess = self.start + decay_time(self.previous, room, self.length)
    else
      guess = self:window_end() + decay_time(self.current, self.limit - hits, self.length)
    end
    return self:first_fit_near(guess, hits) - self.now
  end

  function SlidingWindow:expires_at()
    return self:window_end() + self.length
  end

  function SlidingWindow:state()
    return {
      tag = 'S',
      window_start = self.start,
      previous = self.previous,
      current = self.current,
    }
  end

  return SlidingWindow
end
