-- Part 5: GCRA (core::algorithm::gcra), for token buckets and nginx-style leaky buckets alike:
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
-- The core holds debt in an i128. Here debt is the pair (q, r) = q·L + r ticks, 0 ≤ r < L:
-- q is whole µs ahead of now and r the tick remainder, exactly the stored (tat − now,
-- tat_remainder), so the product (tat − now)·L — unbounded when the clock went back — is
-- never formed, and dividing by L is free. The other operands, n·W ≤ C·W, stay below 2^53
-- because the store refuses quotas with C·W ≥ 2^53. One corner stays approximate: a refund of
-- n·W ≥ 2^53 ticks against a debt ≥ 2^53 ticks, which needs the clock to have gone back by
-- more than about 2^53 / L µs.

-- Defined on first use (see decide.lua).
local function define_gcra()
  local Gcra = {}
  Gcra.__index = Gcra
  Gcra.storage = STRING_STORAGE
  local ClosedBucket = {}
  ClosedBucket.__index = ClosedBucket

  local TWO_POW_53 = 9007199254740992

  STATE_DECODERS.G = function(fields)
    return { tag = 'G', tat = tonumber(fields[3]), remainder = tonumber(fields[4]) }
  end

  STATE_ENCODERS.G = function(state)
    return { state.tat, state.remainder }
  end

  local function gcra_bucket(now, ticks_per_micro, hit_cost, capacity, ahead, remainder)
    return setmetatable({
      now = now,
      ticks_per_micro = ticks_per_micro, -- L
      hit_cost = hit_cost, -- W
      capacity = capacity, -- C
      ahead = ahead, -- q: whole µs of debt
      remainder = remainder, -- r: ticks of debt beyond them, < L
    }, Gcra)
  end

  function Gcra.at(quota, state, now)
    local ticks_per_micro, capacity = quota.limit, quota.capacity
    if ticks_per_micro == 0 or capacity == 0 then
      return setmetatable({ now = now, window = quota.window }, ClosedBucket)
    end
    local ahead, remainder = 0, 0
    if state and state.tag == 'G' then
      -- The stored remainder reaches L when the limit was lowered on reload: carry it.
      local carry = floor(state.remainder / ticks_per_micro)
      ahead = state.tat - now + carry
      remainder = state.remainder - carry * ticks_per_micro
      if ahead < 0 then
        -- (ahead · L + remainder) < 0 since remainder < L: no debt.
        ahead, remainder = 0, 0
      end
    end
    return gcra_bucket(now, ticks_per_micro, max(quota.window, 1), capacity, ahead, remainder)
  end

  function Gcra:with_debt(ahead, remainder)
    return gcra_bucket(
      self.now, self.ticks_per_micro, self.hit_cost, self.capacity, ahead, remainder
    )
  end

  -- `ticks` (an integer below 2^53) as a pair (q, r).
  function Gcra:pair(ticks)
    local remainder = ticks % self.ticks_per_micro
    return (ticks - remainder) / self.ticks_per_micro, remainder
  end

  -- Whether the debt is at most (q, r).
  function Gcra:debt_at_most(q, r)
    return self.ahead < q or (self.ahead == q and self.remainder <= r)
  end

  -- The debt minus (q, r), which must not exceed it.
  function Gcra:debt_minus(q, r)
    local ahead, remainder = self.ahead - q, self.remainder - r
    if remainder < 0 then
      ahead, remainder = ahead - 1, remainder + self.ticks_per_micro
    end
    return ahead, remainder
  end

  -- Whole µs until a debt of (q, r) has drained (ceil).
  local function micros_to_drain(q, r)
    if r > 0 then
      return q + 1
    end
    return q
  end

  function Gcra:reset_after()
    return micros_to_drain(self.ahead, self.remainder)
  end

  function Gcra:fits(hits)
    -- debt + n·W ≤ C·W ⇔ debt ≤ (C − n)·W, which is below 2^53.
    return hits <= self.capacity and self:debt_at_most(self:pair((self.capacity - hits) * self.hit_cost))
  end

  function Gcra:charged(hits)
    local q, r = self:pair(hits * self.hit_cost)
    local ahead, remainder = self.ahead + q, self.remainder + r
    if remainder >= self.ticks_per_micro then
      ahead, remainder = ahead + 1, remainder - self.ticks_per_micro
    end
    return self:with_debt(ahead, remainder)
  end

  function Gcra:refunded(hits)
    local cost = hits * self.hit_cost
    if cost < TWO_POW_53 then
      local q, r = self:pair(cost)
      if self:debt_at_most(q, r) then
        return self:with_debt(0, 0)
      end
      return self:with_debt(self:debt_minus(q, r))
    end
    -- ahead · L is exact below 2^53 and rounds to at least 2^53 above, so this test is exact.
    local debt = self.ahead * self.ticks_per_micro + self.remainder
    if debt < TWO_POW_53 then
      return self:with_debt(0, 0)
    end
    -- The approximate corner (see the top of this file).
    local rest = debt - cost
    if rest <= 0 then
      return self:with_debt(0, 0)
    end
    local remainder = rest % self.ticks_per_micro
    return self:with_debt((rest - remainder) / self.ticks_per_micro, remainder)
  end

  function Gcra:snapshot()
    local capacity_ticks = self.capacity * self.hit_cost
    -- Exact below 2^53; at least 2^53 (so above capacity_ticks) otherwise.
    local debt = self.ahead * self.ticks_per_micro + self.remainder
    local room = 0
    if debt < capacity_ticks then
      room = floor((capacity_ticks - debt) / self.hit_cost)
    end
    return min(room, self.capacity), self:reset_after()
  end

  function Gcra:retry_after(hits)
    if hits > self.capacity then
      return self:reset_after()
    end
    -- Called only when the hits do not fit, so debt > (C − n)·W.
    local q, r = self:pair((self.capacity - hits) * self.hit_cost)
    return micros_to_drain(self:debt_minus(q, r))
  end

  function Gcra:expires_at()
    return self.now + self:reset_after()
  end

  function Gcra:state()
    return { tag = 'G', tat = self.now + self.ahead, remainder = self.remainder }
  end

  -- A bucket that admits nothing: no rate (L = 0) or no room (C = 0).
  function ClosedBucket:fits(_hits)
    return false
  end

  function ClosedBucket:charged(_hits)
    return self
  end

  function ClosedBucket:refunded(_hits)
    return self
  end

  function ClosedBucket:snapshot()
    return 0, 0
  end

  function ClosedBucket:retry_after(_hits)
    return self.window
  end

  function ClosedBucket:expires_at()
    return self.now
  end

  function ClosedBucket:state()
    return { tag = 'G', tat = self.now, remainder = 0 }
  end

  return Gcra
end
