-- Part 4: sliding log (core::arithmetic::algorithm::sliding_log): the exact list of admitted hits, (time,
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
-- entries it needs (the oldest and the newest; the expired ones it drops; the oldest ones a
-- retry waits for) and writes only what changed.
--
-- In the script a key's log is one table, which evaluations change in place (the core's copy
-- would cost Redis as much as the decision): decide.lua hands each mention of a key the log its
-- last admitted mention left, and nothing reaches Redis unless the request commits (with
-- --charge every-descriptor, a descriptor that may be given up changes a 'copy'). An
-- evaluation that is not admitted changes nothing but what 'at' does (drop expired entries,
-- fold beyond the cap), which gives the same log when done again at the same instant (a key
-- has one window).
--   { [1] = expires_at (set by 'state'), key = the stored hash (nil for a fresh log), head,
--     tail, used, time = {}, count = {}, changed = {} }
-- time[i] and count[i] hold entry i once read or changed; changed[i] is true for every entry
-- changed or removed since it was read, which the write sets or deletes.

-- Defined on first use (see decide.lua). The methods are the branches of one function (see
-- the cost note in prelude.lua), each naming its arguments.
local function define_sliding_log()
  -- core::arithmetic::algorithm::SLIDING_LOG_MAX_LIMIT.
  local SLIDING_LOG_MAX_ENTRIES = 10000

  -- Fields per HSET/HDEL call: well below Lua's limit on unpacked arguments.
  local SLIDING_LOG_FIELDS_PER_CALL = 1000

  -- The log looked at (Rust's `Log`), set by 'at'.
  local limit, now, length, log

  -- Keeps entry `index` of `stored` from its field's value ("<time> <count>", nil if none).
  local function cache_entry(stored, index, value)
    local time, count = string.match(value or '', '^(%S+) (%S+)$')
    time = tonumber(time)
    stored.time[index], stored.count[index] = time, tonumber(count)
    return time
  end

  -- Entry `index`: time, count. Each is read from Redis at most once.
  local function entry(index)
    local time = log.time[index]
    if time == nil then
      time = cache_entry(log, index, redis.call('HGET', log.key, string.format('%d', index)))
    end
    return time, log.count[index]
  end

  local function set_entry(index, time, count)
    log.time[index], log.count[index], log.changed[index] = time, count, true
  end

  local function newest_time()
    if log.tail < log.head then
      return nil
    end
    return (entry(log.tail))
  end

  local function reset_after()
    local newest = newest_time()
    if newest == nil then
      return 0
    end
    return math.max(newest + length - now, 0)
  end

  local function fold_oldest_beyond_cap()
    while log.tail - log.head + 1 > SLIDING_LOG_MAX_ENTRIES do
      local head = log.head
      local _, oldest_count = entry(head)
      local next_time, next_count = entry(head + 1)
      set_entry(head + 1, next_time, next_count + oldest_count)
      log.changed[head] = true
      log.head = head + 1
    end
  end

  return function(method, a, b, c, d, e)
    if method == 'at' then
      local quota_limit, window, state, at_now = a, b, d, e
      limit, now, length = quota_limit, at_now, math.max(window, 1)
      log = state
        or { head = 1, tail = 0, used = 0, time = {}, count = {}, changed = {} }
      local oldest_kept = now - length
      while log.head <= log.tail do
        local time, count = entry(log.head)
        if time > oldest_kept then
          break
        end
        log.used = log.used - count
        log.changed[log.head] = true
        log.head = log.head + 1
      end
      fold_oldest_beyond_cap()
    elseif method == 'fits' then
      local hits = a
      return log.used + hits <= limit
    elseif method == 'charge' then
      -- Rust's append: at max(now, newest), merged into the newest entry if at the same time.
      local hits = a
      if hits > 0 then
        local newest = newest_time()
        local time = newest and math.max(newest, now) or now
        if newest == time then
          local _, newest_count = entry(log.tail)
          set_entry(log.tail, time, newest_count + hits)
        else
          log.tail = log.tail + 1
          set_entry(log.tail, time, hits)
        end
        log.used = log.used + hits
        fold_oldest_beyond_cap()
      end
    elseif method == 'refund' then
      -- Rust's take_back_newest.
      local hits = a
      while hits > 0 and log.tail >= log.head do
        local time, count = entry(log.tail)
        local taken = math.min(hits, count)
        if taken == count then
          log.changed[log.tail] = true
          log.tail = log.tail - 1
        else
          set_entry(log.tail, time, count - taken)
        end
        log.used = log.used - taken
        hits = hits - taken
      end
    elseif method == 'snapshot' then
      return math.max(limit - log.used, 0), reset_after()
    elseif method == 'retry_after' then
      local hits = a
      if hits > limit then
        return reset_after()
      end
      -- Rust's freed_at: when enough of the oldest entries have expired to free the excess.
      local excess = math.max(log.used + hits - limit, 0)
      local freed = 0
      for index = log.head, log.tail do
        local time, count = entry(index)
        freed = freed + count
        if freed >= excess then
          return time + length - now
        end
      end
      return reset_after()
    elseif method == 'state' then
      -- The log itself: evaluations change it in place (see the top of this file).
      -- expires_at = newest + W, now when empty.
      local newest = newest_time()
      log[1] = newest and newest + length or now
      return log
    elseif method == 'copy' then
      -- The log `state` as a new table, for a change that may be given up (decide.lua).
      local state = a
      local copy = {
        state[1],
        key = state.key,
        head = state.head,
        tail = state.tail,
        used = state.used,
        time = {},
        count = {},
        changed = {},
      }
      for index, time in pairs(state.time) do
        copy.time[index] = time
      end
      for index, count in pairs(state.count) do
        copy.count[index] = count
      end
      for index, changed in pairs(state.changed) do
        copy.changed[index] = changed
      end
      return copy
    elseif method == 'load' then
      local key, load_now = a, b
      local meta = redis.call('HMGET', key, 'e', 'u', 'h', 't')
      local expires_at = tonumber(meta[1])
      if not expires_at or expires_at <= load_now then
        return nil
      end
      local stored = {
        expires_at,
        key = key,
        head = tonumber(meta[3]),
        tail = tonumber(meta[4]),
        used = tonumber(meta[2]),
        time = {},
        count = {},
        changed = {},
      }
      -- Every evaluation reads the oldest entry (has it expired?) and the newest (reset_after):
      -- one call for both.
      if stored.head <= stored.tail then
        local ends = redis.call(
          'HMGET', key, string.format('%d', stored.head), string.format('%d', stored.tail)
        )
        cache_entry(stored, stored.head, ends[1])
        cache_entry(stored, stored.tail, ends[2])
      end
      return stored
    elseif method == 'write' then
      local key, state, ttl_ms = a, b, c
      local stored = state.key ~= nil
      if not stored then
        -- Started afresh: whatever the key holds is expired (UNLINK frees a long log lazily).
        redis.call('UNLINK', key)
      end
      local removed, fields = {}, {}
      for index in pairs(state.changed) do
        if index >= state.head and index <= state.tail then
          fields[#fields + 1] = string.format('%d', index)
          fields[#fields + 1] = string.format('%d %d', state.time[index], state.count[index])
        elseif stored then
          removed[#removed + 1] = string.format('%d', index)
        end
      end
      for first = 1, #removed, SLIDING_LOG_FIELDS_PER_CALL do
        local last = math.min(first + SLIDING_LOG_FIELDS_PER_CALL - 1, #removed)
        redis.call('HDEL', key, unpack(removed, first, last))
      end
      -- The header goes with the last entries written.
      local header = #fields
      fields[header + 1], fields[header + 2] = 'e', string.format('%d', state[1])
      fields[header + 3], fields[header + 4] = 'u', string.format('%d', state.used)
      fields[header + 5], fields[header + 6] = 'h', string.format('%d', state.head)
      fields[header + 7], fields[header + 8] = 't', string.format('%d', state.tail)
      for first = 1, #fields, 2 * SLIDING_LOG_FIELDS_PER_CALL do
        local last = math.min(first + 2 * SLIDING_LOG_FIELDS_PER_CALL - 1, #fields)
        redis.call('HSET', key, unpack(fields, first, last))
      end
      redis.call('PEXPIRE', key, string.format('%d', ttl_ms))
    end
  end
end
