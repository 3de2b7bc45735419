-- Part 5: GCRA (core::arithmetic::algorithm::gcra), for token buckets and nginx-style leaky buckets alike:
-- they differ only in the capacity C, which the caller passes. One hit costs T = W / L µs; a
-- counter may run at most τ = C · T ahead of `now`. Everything is counted in ticks of 1/L µs,
-- where a hit costs exactly W ticks: integer arithmetic, no drift.
--
--   debt        = max(0, (tat − now) · L + tat_remainder)        ticks still to drain
--   admit       ⇔ n ≤ C  and  debt + n·W ≤ C·W
--   charge      : debt' = debt + n·W
--   refund      : debt' = max(0, debt − n·W)
--   next state  : tat = now + floor(debt' / L),  tat_remainder = debt' mod L
--   remaining   = clamp(floor((C·W − debt') / W), 0, C)
--   reset_after = ceil(debt' / L)
--   retry_after = ceil((debt + n·W − C·W) / L)          (n > C: reset_after)
--   expires_at  = now + reset_after
--   L = 0 or C = 0: nothing ever fits; remaining 0, reset_after 0, retry_after W.
--
-- The core holds debt in an i128. Here every amount of ticks is a pair (q, r) = q·L + r, 0 ≤ r < L:
-- q whole µs and r the ticks beyond them. The debt is exactly the stored (tat − now,
-- tat_remainder), so the product (tat − now)·L — unbounded when the clock went back — is never
-- formed. A charge of n·W ticks is made as a pair too, from W = a·L + b (a = W div L, b = W mod
-- L): n·W = (n·a + (n·b div L))·L + (n·b mod L). Both parts are exact below 2^53: n·b < n·L ≤
-- C·L, and n·a ≤ C·W / L, the µs a full bucket takes to drain; the store refuses quotas with
-- C·L ≥ 2^53 or a drain past 2^51 µs (script.rs, `check_quota`). So a bucket of 10^6 tokens a
-- day (C·W ≈ 8.6e16 ticks, past 2^53) is exact. One corner stays approximate: a refund of
-- n·b or n·a ≥ 2^53 (so n > C) against a debt ≥ 2^53 ticks, which needs the clock to have gone
-- back by more than about 2^53 / L µs.
--
-- A leaky bucket that queues (core::arithmetic::algorithm::Queue) is sent its capacity as
-- "C delay max_wait" rather than C; with δ = delay·W and M = max_wait µs:
--   wait  = ceil(max(0, debt − δ) / L)       µs, before this request's charge
--   admit ⇔ as above  and  debt ≤ δ + M·L
--   retry = max(as above, ceil((debt − δ − M·L) / L))
-- 'charge' returns the wait (nil from the other algorithms: 0).
--
-- State: "G <expires_at> <tat> <tat_remainder>", { expires_at, tat, tat_remainder } here.

local GCRA_PATTERN = '^G (%-?%d+) (%-?%d+) (%-?%d+)$'
local GCRA_FORMAT = 'G %d %d %d'

-- Defined on first use (see decide.lua). The methods are the branches of one function (see
-- the cost note in prelude.lua), each naming its arguments.
local function define_gcra()
  local TWO_POW_53 = 9007199254740992

  -- The bucket looked at (Rust's `Bucket`), set by 'at'; or, when `closed`, Rust's `Closed`:
  -- no rate (L = 0) or no room (C = 0), which admits nothing.
  local closed
  local window -- the quota's window: a closed bucket's retry_after
  local now
  local ticks_per_micro -- L
  local hit_cost -- W
  local capacity -- C
  local ahead -- q: whole µs of debt
  local remainder -- r: ticks of debt beyond them, < L

  local whole_micros -- a = W div L: whole µs of one hit's cost
  local micros_rest -- b = W mod L: its ticks beyond them

  -- A queueing bucket's delay (hits let through at once) and longest wait (µs); nil: the
  -- bucket answers at once.
  local queue_delay, queue_max_wait

  -- The capacity C as sent, a number, or "C delay max_wait" for a bucket that queues.
  local function read_capacity(text)
    local plain = number(text)
    if plain then
      queue_delay = nil
      return plain
    end
    local capacity_part, delay_part, max_wait_part = string.match(text, '^(%d+) (%d+) (%d+)$')
    queue_delay, queue_max_wait = number(delay_part), number(max_wait_part)
    return number(capacity_part)
  end

  -- n·W ticks as a pair (q, r), for n·b below 2^53 (n ≤ C suffices).
  local function cost_pair(hits)
    local spill = hits * micros_rest
    local spill_remainder = spill % ticks_per_micro
    return hits * whole_micros + (spill - spill_remainder) / ticks_per_micro, spill_remainder
  end

  -- Whether the debt is at most (q, r).
  local function debt_at_most(q, r)
    return ahead < q or (ahead == q and remainder <= r)
  end

  -- Whether the debt is below (q, r).
  local function debt_below(q, r)
    return ahead < q or (ahead == q and remainder < r)
  end

  -- The debt minus (q, r), which must not exceed it.
  local function debt_minus(q, r)
    local rest_ahead, rest_remainder = ahead - q, remainder - r
    if rest_remainder < 0 then
      rest_ahead, rest_remainder = rest_ahead - 1, rest_remainder + ticks_per_micro
    end
    return rest_ahead, rest_remainder
  end

  -- Whole µs until a debt of (q, r) has drained (ceil).
  local function micros_to_drain(q, r)
    if r > 0 then
      return q + 1
    end
    return q
  end

  -- The most debt a queued request may find, δ + M·L, as a pair.
  local function longest_queue()
    local q, r = cost_pair(queue_delay)
    return q + queue_max_wait, r
  end

  -- µs this request waits for its turn: until max(0, debt − δ) has drained.
  local function wait()
    if not queue_delay then
      return 0
    end
    local q, r = cost_pair(queue_delay)
    if debt_at_most(q, r) then
      return 0
    end
    return micros_to_drain(debt_minus(q, r))
  end

  -- Whether this request's turn comes within the longest wait.
  local function turn_in_time()
    return not queue_delay or debt_at_most(longest_queue())
  end

  -- Looks at the bucket at `at_now`, given the stored arrival time and its remainder (nil:
  -- none).
  local function look_at(quota_limit, quota_window, capacity_text, tat, tat_remainder, at_now)
    local quota_capacity = read_capacity(capacity_text)
    now, window = at_now, quota_window
    closed = quota_limit == 0 or quota_capacity == 0
    if closed then
      return
    end
    ticks_per_micro, hit_cost, capacity = quota_limit, math.max(quota_window, 1), quota_capacity
    micros_rest = hit_cost % ticks_per_micro
    whole_micros = (hit_cost - micros_rest) / ticks_per_micro
    ahead, remainder = 0, 0
    if tat then
      -- The stored remainder reaches L when the limit was lowered on reload: carry it.
      local carry = math.floor(tat_remainder / ticks_per_micro)
      ahead = tat - now + carry
      remainder = tat_remainder - carry * ticks_per_micro
      if ahead < 0 then
        -- (ahead · L + remainder) < 0 since remainder < L: no debt.
        ahead, remainder = 0, 0
      end
    end
  end

  local function fits(hits)
    -- debt + n·W ≤ C·W ⇔ debt ≤ (C − n)·W.
    return not closed
      and hits <= capacity
      and debt_at_most(cost_pair(capacity - hits))
      and turn_in_time()
  end

  -- Never on a closed bucket: nothing fits it. The wait of the hits charged.
  local function charge(hits)
    local waited = wait()
    local q, r = cost_pair(hits)
    ahead, remainder = ahead + q, remainder + r
    if remainder >= ticks_per_micro then
      ahead, remainder = ahead + 1, remainder - ticks_per_micro
    end
    return waited
  end

  local function snapshot()
    if closed then
      return 0, 0
    end
    -- room = floor((C·W − debt) / W) = C − ceil(debt / W) while debt < C·W, else 0:
    -- ceil(debt / W), the fewest hits whose cost covers the debt, is at most C there, so
    -- each candidate's cost is an exact pair; the estimate in doubles is off by one or two.
    local room = 0
    if debt_below(cost_pair(capacity)) then
      local covering = math.floor((ahead * ticks_per_micro + remainder) / hit_cost)
      covering = math.min(math.max(covering, 0), capacity)
      while covering < capacity and not debt_at_most(cost_pair(covering)) do
        covering = covering + 1
      end
      while covering > 0 and debt_at_most(cost_pair(covering - 1)) do
        covering = covering - 1
      end
      room = capacity - covering
    end
    return room, micros_to_drain(ahead, remainder)
  end

  local function retry_after(hits)
    if closed then
      return window
    end
    if hits > capacity then
      return micros_to_drain(ahead, remainder) -- reset_after
    end
    -- Called only when the hits do not fit: debt > (C − n)·W, or the turn comes too late.
    local room = 0
    if not debt_at_most(cost_pair(capacity - hits)) then
      room = micros_to_drain(debt_minus(cost_pair(capacity - hits)))
    end
    if turn_in_time() then
      return room
    end
    return math.max(room, micros_to_drain(debt_minus(longest_queue())))
  end

  -- The state of the bucket looked at: expires_at = now + reset_after, tat = now + q, and
  -- tat's remainder.
  local function next_state()
    if closed then
      return now, now, 0
    end
    return now + micros_to_drain(ahead, remainder), now + ahead, remainder
  end

  return function(method, a, b, c, d, e, f, g, h, i)
    if method == 'at' then
      local quota_limit, quota_window, quota_capacity, state, at_now = a, b, c, d, e
      if state then
        look_at(quota_limit, quota_window, quota_capacity, state[2], state[3], at_now)
      else
        look_at(quota_limit, quota_window, quota_capacity, nil, nil, at_now)
      end
    elseif method == 'charge_alone' then
      -- A request of this one counter charging `hits` (`asked` with its class's reserve),
      -- decided and written in one go, as the fixed window's 'charge_alone' (see there).
      local key, quota_limit, quota_window, capacity_text, hits, asked, at_now, extra_ttl_ms,
        may_keep_ttl = a, b, c, d, e, f, g, h, i
      local stored_expiry, tat, tat_remainder = read_record(key, GCRA_PATTERN, at_now)
      look_at(quota_limit, quota_window, capacity_text, tat, tat_remainder, at_now)
      if not fits(asked) then
        local remaining, until_reset = snapshot()
        return false, remaining, until_reset, math.max(retry_after(asked), 1)
      end
      local waited = charge(hits)
      local expires_at, next_tat, next_remainder = next_state()
      -- Charging nothing to an empty bucket leaves a state that means nothing already.
      local ttl_ms = math.ceil((expires_at - now) / 1000) + extra_ttl_ms
      if ttl_ms > 0 then
        write_record(key, string.format(GCRA_FORMAT, expires_at, next_tat, next_remainder),
          ttl_ms, may_keep_ttl and expires_at == stored_expiry)
      else
        redis.call('UNLINK', key)
      end
      local remaining, until_reset = snapshot()
      return true, remaining, until_reset, waited
    elseif method == 'fits' then
      local hits = a
      return fits(hits)
    elseif method == 'charge' then
      local hits = a
      return charge(hits)
    elseif method == 'refund' then
      local hits = a
      if closed then
        return
      end
      if hits * micros_rest < TWO_POW_53 and hits * whole_micros < TWO_POW_53 then
        local q, r = cost_pair(hits)
        if debt_at_most(q, r) then
          ahead, remainder = 0, 0
        else
          ahead, remainder = debt_minus(q, r)
        end
        return
      end
      -- n·W ≥ 2^53 (n·b or n·a·L is). ahead · L is exact below 2^53 and rounds to at least 2^53 above, so
      -- this test is exact.
      local debt = ahead * ticks_per_micro + remainder
      if debt < TWO_POW_53 then
        ahead, remainder = 0, 0
        return
      end
      -- The approximate corner (see the top of this file).
      local rest = debt - hits * hit_cost
      if rest <= 0 then
        ahead, remainder = 0, 0
        return
      end
      local rest_remainder = rest % ticks_per_micro
      ahead, remainder = (rest - rest_remainder) / ticks_per_micro, rest_remainder
    elseif method == 'snapshot' then
      return snapshot()
    elseif method == 'retry_after' then
      local hits = a
      return retry_after(hits)
    elseif method == 'state' then
      -- Into the table `into` when given.
      local into = a
      local expires_at, tat, tat_remainder = next_state()
      if into then
        into[1], into[2], into[3] = expires_at, tat, tat_remainder
        return into
      end
      return { expires_at, tat, tat_remainder }
    elseif method == 'load' then
      local key, load_now = a, b
      return load_state(key, GCRA_PATTERN, load_now)
    elseif method == 'write' then
      local key, state, ttl_ms, keep_ttl = a, b, c, d
      write_state(key, GCRA_FORMAT, state, ttl_ms, keep_ttl)
    end
  end
end
