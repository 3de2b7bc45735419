-- Part 4: sliding log (core::algorithm::sliding_log): the exact list of admitted hits, (time,
-- count) oldest first, kept as two parallel arrays. All integer. Every decision reads and
-- rewrites the whole log, as the memory store does: for small limits only.
--
--   log         = stored entries with time > now − W and count > 0
--                 (entries from the future — the clock went back — still count)
--   used        = Σ count
--   admit       ⇔ used + n ≤ L
--   commit      : append (max(now, newest), n), merged into the newest entry if same time
--   refund      : take n back from the newest entries first
--   remaining   = max(0, L − used)
--   reset_after = newest + W − now       (0 when empty)
--   retry_after = oldest-first, the first entry whose expiry frees used + n − L:
--                 entry.time + W − now   (n > L: reset_after; always at least 1)
--   expires_at  = newest + W             (now when empty)
--   More than SLIDING_LOG_MAX_ENTRIES entries: the oldest is folded into the next one.

local SlidingLog = {}
SlidingLog.__index = SlidingLog

-- core::algorithm::SLIDING_LOG_MAX_LIMIT.
local SLIDING_LOG_MAX_ENTRIES = 10000

STATE_DECODERS.L = function(fields)
  local times, counts = {}, {}
  for index = 3, #fields - 1, 2 do
    times[#times + 1] = tonumber(fields[index])
    counts[#counts + 1] = tonumber(fields[index + 1])
  end
  return { tag = 'L', times = times, counts = counts }
end

STATE_ENCODERS.L = function(state)
  local numbers = {}
  for index = 1, #state.times do
    numbers[2 * index - 1] = state.times[index]
    numbers[2 * index] = state.counts[index]
  end
  return numbers
end

local function sliding_log(limit, now, length, times, counts)
  return setmetatable(
    { limit = limit, now = now, length = length, times = times, counts = counts },
    SlidingLog
  )
end

function SlidingLog.at(quota, state, now)
  local length = max(quota.window, 1)
  local oldest_kept = now - length
  local times, counts = {}, {}
  if state and state.tag == 'L' then
    for index = 1, #state.times do
      if state.times[index] > oldest_kept and state.counts[index] > 0 then
        times[#times + 1] = state.times[index]
        counts[#counts + 1] = state.counts[index]
      end
    end
  end
  local log = sliding_log(quota.limit, now, length, times, counts)
  log:fold_oldest_beyond_cap()
  return log
end

function SlidingLog:copy()
  local times, counts = {}, {}
  for index = 1, #self.times do
    times[index] = self.times[index]
    counts[index] = self.counts[index]
  end
  return sliding_log(self.limit, self.now, self.length, times, counts)
end

function SlidingLog:used()
  local used = 0
  for index = 1, #self.counts do
    used = used + self.counts[index]
  end
  return used
end

function SlidingLog:newest_time()
  return self.times[#self.times]
end

function SlidingLog:reset_after()
  local newest = self:newest_time()
  if newest == nil then
    return 0
  end
  return max(newest + self.length - self.now, 0)
end

function SlidingLog:fold_oldest_beyond_cap()
  while #self.times > SLIDING_LOG_MAX_ENTRIES do
    local oldest = table.remove(self.counts, 1)
    table.remove(self.times, 1)
    self.counts[1] = self.counts[1] + oldest
  end
end

function SlidingLog:append(hits)
  local newest = self:newest_time()
  local time = newest and max(newest, self.now) or self.now
  local last = #self.times
  if last > 0 and self.times[last] == time then
    self.counts[last] = self.counts[last] + hits
  else
    self.times[last + 1] = time
    self.counts[last + 1] = hits
  end
  self:fold_oldest_beyond_cap()
end

function SlidingLog:take_back_newest(hits)
  while hits > 0 do
    local last = #self.counts
    if last == 0 then
      return
    end
    local taken = min(hits, self.counts[last])
    self.counts[last] = self.counts[last] - taken
    hits = hits - taken
    if self.counts[last] == 0 then
      self.counts[last] = nil
      self.times[last] = nil
    end
  end
end

-- When enough of the oldest entries have expired to free `excess` hits (nil: never).
function SlidingLog:freed_at(excess)
  local freed = 0
  for index = 1, #self.counts do
    freed = freed + self.counts[index]
    if freed >= excess then
      return self.times[index] + self.length
    end
  end
  return nil
end

function SlidingLog:fits(hits)
  return self:used() + hits <= self.limit
end

function SlidingLog:charged(hits)
  local next = self:copy()
  if hits > 0 then
    next:append(hits)
  end
  return next
end

function SlidingLog:refunded(hits)
  local next = self:copy()
  next:take_back_newest(hits)
  return next
end

function SlidingLog:snapshot()
  return max(self.limit - self:used(), 0), self:reset_after()
end

function SlidingLog:retry_after(hits)
  if hits > self.limit then
    return self:reset_after()
  end
  local excess = max(self:used() + hits - self.limit, 0)
  local at = self:freed_at(excess)
  if at == nil then
    return self:reset_after()
  end
  return at - self.now
end

function SlidingLog:expires_at()
  local newest = self:newest_time()
  if newest == nil then
    return self.now
  end
  return newest + self.length
end

function SlidingLog:state()
  return { tag = 'L', times = self.times, counts = self.counts }
end
