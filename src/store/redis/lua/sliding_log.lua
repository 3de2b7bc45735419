-- Part 4: sliding log (core::algorithm::sliding_log): the exact list of admitted hits, (time,
-- count) oldest first. All integer.
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
--
-- The core copies the whole log at every decision; a script that read and rewrote it would
-- cost Redis milliseconds for a few thousand entries. So the log is a deque in a hash:
--   e = expires_at, u = used, h = index of the oldest entry, t = index of the newest
--   (t = h − 1 when empty), and field "<i>" = "<time> <count>" for every i in h..t.
-- Times only grow along the log, so expired entries are a prefix: a decision reads the few
-- entries it needs (the newest; the expired ones it drops; the oldest ones a retry waits for)
-- and writes only what changed. A log view is the stored hash plus an overlay of changed
-- entries, so an evaluation can be discarded (all or nothing) or built upon (a counter named
-- twice) without touching Redis.

-- Defined on first use (see decide.lua).
local function define_sliding_log()
  local SlidingLog = {}
  SlidingLog.__index = SlidingLog

  -- core::algorithm::SLIDING_LOG_MAX_LIMIT.
  local SLIDING_LOG_MAX_ENTRIES = 10000

  -- Fields per HSET/HDEL call: well below Lua's limit on unpacked arguments.
  local SLIDING_LOG_FIELDS_PER_CALL = 1000

  -- Entries of one stored log, read at most once each.
  local function log_source(key)
    return { key = key, entries = {} }
  end

  local function read_log_entry(source, index)
    local entry = source.entries[index]
    if entry == nil then
      local value = redis.call('HGET', source.key, format_integer(index))
      local time, count = string.match(value or '', '^(%S+) (%S+)$')
      entry = { time = tonumber(time), count = tonumber(count) }
      source.entries[index] = entry
    end
    return entry
  end

  local function sliding_log(limit, now, length, source, head, tail, used, overlay)
    return setmetatable({
      limit = limit,
      now = now,
      length = length,
      source = source, -- the stored log this view starts from; nil for a fresh one
      head = head,
      tail = tail,
      used = used,
      overlay = overlay, -- index → changed entry, or false when removed
    }, SlidingLog)
  end

  SlidingLog.storage = {
    load = function(key, now)
      local meta = redis.call('HMGET', key, 'e', 'u', 'h', 't')
      local expires_at = tonumber(meta[1])
      if not expires_at or expires_at <= now then
        return nil
      end
      return sliding_log(
        0, now, 1, log_source(key), tonumber(meta[3]), tonumber(meta[4]), tonumber(meta[2]), {}
      )
    end,
    write = function(key, log, expires_at, ttl_ms)
      if log.source == nil then
        -- Started afresh: whatever the key holds is expired (UNLINK frees a long log lazily).
        redis.call('UNLINK', key)
      end
      local removed, changed = {}, {}
      for index, entry in pairs(log.overlay) do
        if entry and index >= log.head and index <= log.tail then
          changed[#changed + 1] = format_integer(index)
          changed[#changed + 1] = format_integer(entry.time) .. ' ' .. format_integer(entry.count)
        elseif log.source ~= nil then
          removed[#removed + 1] = format_integer(index)
        end
      end
      for first = 1, #removed, SLIDING_LOG_FIELDS_PER_CALL do
        local last = math.min(first + SLIDING_LOG_FIELDS_PER_CALL - 1, #removed)
        redis.call('HDEL', key, unpack(removed, first, last))
      end
      for first = 1, #changed, 2 * SLIDING_LOG_FIELDS_PER_CALL do
        local last = math.min(first + 2 * SLIDING_LOG_FIELDS_PER_CALL - 1, #changed)
        redis.call('HSET', key, unpack(changed, first, last))
      end
      redis.call(
        'HSET',
        key,
        'e',
        format_integer(expires_at),
        'u',
        format_integer(log.used),
        'h',
        format_integer(log.head),
        't',
        format_integer(log.tail)
      )
      redis.call('PEXPIRE', key, format_integer(ttl_ms))
    end,
  }

  function SlidingLog:copy()
    local overlay = {}
    for index, entry in pairs(self.overlay) do
      overlay[index] = entry
    end
    return sliding_log(
      self.limit, self.now, self.length, self.source, self.head, self.tail, self.used, overlay
    )
  end

  function SlidingLog.at(quota, state, now)
    local log
    if getmetatable(state) == SlidingLog then
      log = state:copy()
    else
      log = sliding_log(0, now, 1, nil, 1, 0, 0, {})
    end
    log.limit, log.now, log.length = quota.limit, now, max(quota.window, 1)
    local oldest_kept = now - log.length
    while log.head <= log.tail and log:entry(log.head).time <= oldest_kept do
      log.used = log.used - log:entry(log.head).count
      log.overlay[log.head] = false
      log.head = log.head + 1
    end
    log:fold_oldest_beyond_cap()
    return log
  end

  function SlidingLog:entry(index)
    local entry = self.overlay[index]
    if entry == nil then
      entry = read_log_entry(self.source, index)
    end
    return entry
  end

  function SlidingLog:newest_time()
    if self.tail < self.head then
      return nil
    end
    return self:entry(self.tail).time
  end

  function SlidingLog:reset_after()
    local newest = self:newest_time()
    if newest == nil then
      return 0
    end
    return max(newest + self.length - self.now, 0)
  end

  function SlidingLog:fold_oldest_beyond_cap()
    while self.tail - self.head + 1 > SLIDING_LOG_MAX_ENTRIES do
      local oldest, next = self:entry(self.head), self:entry(self.head + 1)
      self.overlay[self.head + 1] = { time = next.time, count = next.count + oldest.count }
      self.overlay[self.head] = false
      self.head = self.head + 1
    end
  end

  function SlidingLog:append(hits)
    local newest = self:newest_time()
    local time = newest and max(newest, self.now) or self.now
    if newest == time then
      self.overlay[self.tail] = { time = time, count = self:entry(self.tail).count + hits }
    else
      self.tail = self.tail + 1
      self.overlay[self.tail] = { time = time, count = hits }
    end
    self.used = self.used + hits
    self:fold_oldest_beyond_cap()
  end

  function SlidingLog:take_back_newest(hits)
    while hits > 0 and self.tail >= self.head do
      local newest = self:entry(self.tail)
      local taken = min(hits, newest.count)
      if taken == newest.count then
        self.overlay[self.tail] = false
        self.tail = self.tail - 1
      else
        self.overlay[self.tail] = { time = newest.time, count = newest.count - taken }
      end
      self.used = self.used - taken
      hits = hits - taken
    end
  end

  -- When enough of the oldest entries have expired to free `excess` hits (nil: never).
  function SlidingLog:freed_at(excess)
    local freed = 0
    for index = self.head, self.tail do
      local entry = self:entry(index)
      freed = freed + entry.count
      if freed >= excess then
        return entry.time + self.length
      end
    end
    return nil
  end

  function SlidingLog:fits(hits)
    return self.used + hits <= self.limit
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
    return max(self.limit - self.used, 0), self:reset_after()
  end

  function SlidingLog:retry_after(hits)
    if hits > self.limit then
      return self:reset_after()
    end
    local excess = max(self.used + hits - self.limit, 0)
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

  -- A view is its own state: evaluations never change a view they hand on (`at` copies it).
  function SlidingLog:state()
    return self
  end

  return SlidingLog
end
