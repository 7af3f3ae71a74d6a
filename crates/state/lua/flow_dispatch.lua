-- flow_dispatch.lua: the fleet-wide waiting room of a model (flow control).
-- Decides whether the model's workers are saturated, where an arriving
-- request goes (dispatched at once, queued, or refused), and which of the
-- calling router's waiting requests may be dispatched now. The order is
-- fleet-wide: the highest priority first; within a priority, tenants share
-- by weight (start-time fair queueing over a virtual time kept here, so a
-- tenant spread over many routers gets its weight's share of the fleet,
-- not one per router). Entries of other routers ahead in that order take
-- their places in the free capacity: their routers dispatch them.
-- Keys (all on the model's first part, one slot): <base>:fb (sorted set of
-- the priorities with waiting entries), <base>:fq:<prio> (sorted set of
-- that priority's entries by virtual start tag; member "router\tseq\t
-- deadline ms"), <base>:fv:<prio> (hash: tenant -> virtual finish tag of
-- its last entry; field "\tV" = the priority's virtual time), <base>:fg
-- (sorted set: entries dispatched and not yet routed, by expiry ms).
-- Saturated: every live worker is past a threshold (in flight over live
-- routers >= the most per worker; fresh reported waiting >= its threshold;
-- fresh KV usage >= its threshold; queued prefill tokens >= theirs).
-- Free capacity: over the workers not past any threshold, the places left
-- below the most in flight (1 each without that limit), less the entries
-- dispatched and not yet routed.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = router id, ARGV[3] = most in flight per worker
-- (0: none), ARGV[4] = waiting requests threshold (-1: none), ARGV[5] = KV
-- usage threshold (-1: none), ARGV[6] = queued prefill tokens threshold
-- (-1: none), ARGV[7] = stale load ms, ARGV[8] = a dispatch's life until
-- its route, ms, ARGV[9] = 1 when an arriving request follows: ARGV[10] =
-- its member (router \t seq \t deadline ms), ARGV[11] = priority (an
-- integer), ARGV[12] = tenant, ARGV[13] = tenant weight (> 0), ARGV[14] = 1
-- if it may wait (0: dispatched at once or refused).
-- Returns {saturated (1/0), arriving: 0 none, 1 dispatched, 2 queued,
-- 3 refused; its virtual start tag (a string, '' unless queued); entries
-- waiting fleet-wide; free capacity left; then the caller's members
-- dispatched by this call (the arriving one is not among them)}.
-- Complexity: O(workers + routers x workers) for the view, O(log N) per
-- entry queued or dispatched, O(bands + capacity + 64) entries scanned.
local now = now_ms()
local me = ARGV[2]
local max_inflight = tonumber(ARGV[3]) or 0
local max_waiting, max_kv, max_prefill = tonumber(ARGV[4]) or -1, tonumber(ARGV[5]) or -1, tonumber(ARGV[6]) or -1
local stale, grant_ms = tonumber(ARGV[7]) or 0, tonumber(ARGV[8]) or 1000
local routers = live_routers(now)
local view = fleet_view(routers)

local live, free = 0, 0
for idx, rec in pairs(view.recs) do
  if rec and rec.lease_until and rec.lease_until > now then
    live = live + 1
    local fresh = rec.load_ms and now - rec.load_ms <= stale
    local inflight = view.inflight[idx] or 0
    local past = (max_inflight > 0 and inflight >= max_inflight)
      or (max_waiting >= 0 and fresh and bounded_count(rec.waiting) >= max_waiting)
      or (max_kv >= 0 and fresh and (rec.kv_usage or 0) >= max_kv)
      or (max_prefill >= 0 and (view.prefill[idx] or 0) >= max_prefill)
    if not past then
      free = free + (max_inflight > 0 and (max_inflight - inflight) or 1)
    end
  end
end
local saturated = live > 0 and free == 0
local grants = BASE .. ':fg'
redis.call('ZREMRANGEBYSCORE', grants, '-inf', string.format('%d', now))
local cap = free - redis.call('ZCARD', grants)
local bands = BASE .. ':fb'
local function queue(p) return BASE .. ':fq:' .. p end
local function vtimes(p) return BASE .. ':fv:' .. p end
local VFIELD = '\tV'

-- A dead entry: past its deadline, or of a router whose lease ended.
local function dead(member)
  local router, deadline = string.match(member, '^(.*)\t%d+\t(%d+)$')
  if not router or tonumber(deadline) < now then return true end
  local lease = redis.call('ZSCORE', BASE .. ':routers', router)
  return lease ~= false and lease ~= nil and tonumber(lease) <= now
end

local function grant(member)
  redis.call('ZADD', grants, now + grant_ms, member)
  redis.call('PEXPIRE', grants, grant_ms + 1000)
end

-- The arriving request's virtual start tag; charges its tenant.
local function charge(p, tenant, weight)
  local vt = vtimes(p)
  local got = redis.call('HMGET', vt, VFIELD, tenant)
  local v, f = tonumber(got[1]) or 0, tonumber(got[2]) or 0
  local start = math.max(v, f)
  redis.call('HSET', vt, tenant, tostring(start + 1 / weight))
  -- Forget up to two tenants whose tag the virtual time has passed: a
  -- tenant's next start would be the virtual time anyway.
  local some = redis.call('HRANDFIELD', vt, 2, 'WITHVALUES')
  for i = 1, #some, 2 do
    if some[i] ~= VFIELD and some[i] ~= tenant and (tonumber(some[i + 1]) or 0) <= v then
      redis.call('HDEL', vt, some[i])
    end
  end
  redis.call('PEXPIRE', vt, 600000)
  return start, vt
end

local arriving, tag = 0, ''
if ARGV[9] == '1' then
  local member, p, tenant = ARGV[10], math.floor(tonumber(ARGV[11]) or 0), ARGV[12]
  local weight, may_wait = tonumber(ARGV[13]) or 1, ARGV[14] == '1'
  if weight <= 0 or weight ~= weight then weight = 1 end
  -- Entries waiting at this priority or above go first.
  local ahead = 0
  for _, b in ipairs(redis.call('ZRANGEBYSCORE', bands, p, '+inf')) do
    ahead = ahead + redis.call('ZCARD', queue(b))
  end
  if cap > 0 and ahead == 0 then
    local start, vt = charge(p, tenant, weight)
    redis.call('HSET', vt, VFIELD, tostring(start))
    grant(member)
    cap = cap - 1
    arriving = 1
  elseif may_wait then
    local start = charge(p, tenant, weight)
    redis.call('ZADD', queue(p), start, member)
    redis.call('ZADD', bands, p, p)
    -- The keys outlive their last entry's deadline by a minute, so a
    -- waiting room nobody calls again leaves nothing behind.
    local keep = (tonumber(string.match(member, '\t(%d+)$')) or now) - now + 60000
    for _, k in ipairs({ queue(p), bands }) do
      if redis.call('PTTL', k) < keep then redis.call('PEXPIRE', k, keep) end
    end
    arriving, tag = 2, tostring(start)
  else
    arriving = 3
  end
end

-- Dispatch in the fleet's order while there is capacity; the caller's
-- entries are dispatched here, the others' wait for their routers.
local mine = {}
local budget = 64
if cap > 0 then
  for _, b in ipairs(redis.call('ZREVRANGE', bands, 0, -1)) do
    local q = queue(b)
    local entries = redis.call('ZRANGE', q, 0, cap + budget - 1, 'WITHSCORES')
    local v = nil
    for i = 1, #entries, 2 do
      if cap <= 0 or budget <= 0 then break end
      local member = entries[i]
      if dead(member) then
        redis.call('ZREM', q, member)
        budget = budget - 1
      else
        if string.sub(member, 1, #me + 1) == me .. '\t' then
          redis.call('ZREM', q, member)
          grant(member)
          mine[#mine + 1] = member
          v = tonumber(entries[i + 1])
        end
        cap = cap - 1
      end
    end
    if v then
      local old = tonumber(redis.call('HGET', vtimes(b), VFIELD)) or 0
      if v > old then redis.call('HSET', vtimes(b), VFIELD, tostring(v)) end
    end
    if redis.call('ZCARD', q) == 0 then redis.call('ZREM', bands, b) end
    if cap <= 0 or budget <= 0 then break end
  end
end

local waiting = 0
for _, b in ipairs(redis.call('ZRANGE', bands, 0, -1)) do
  waiting = waiting + redis.call('ZCARD', queue(b))
end
local out = { saturated and 1 or 0, arriving, tag, waiting, math.max(cap, 0) }
for _, m in ipairs(mine) do out[#out + 1] = m end
return out
