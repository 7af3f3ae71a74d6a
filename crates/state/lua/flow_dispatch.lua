-- flow_dispatch.lua: the fleet-wide waiting room of a model (flow control).
-- Decides whether the model's workers are saturated, where an arriving
-- request goes (dispatched at once, queued, or refused), and which of the
-- calling router's waiting requests may be dispatched now. The order is
-- fleet-wide: the highest priority first; within a priority, tenants share
-- by weight (start-time fair queueing with one queue per tenant: a tenant's
-- next entry starts at its tag H, the next after it at H + 1/weight, and a
-- tenant that arrives with nothing waiting starts at the priority's virtual
-- time V or its last finish, whichever is later). Tags advance only when an
-- entry is dispatched, so entries that time out, are shed or whose clients
-- leave cost their tenant nothing, and a tenant spread over many routers
-- gets its weight's share of the fleet, not one per router. Entries of
-- other routers ahead in that order take their places in the free
-- capacity: their routers dispatch them.
-- Keys (all on the model's first part, one slot): <base>:fb (sorted set of
-- the priorities with waiting entries), <base>:fk:<prio> (sorted set: the
-- tenants with waiting entries, by the tag of their next entry),
-- <base>:fe:<prio>:<tenant> (sorted set: the tenant's entries by arrival,
-- member "router\tseq\tdeadline ms"), <base>:fm:<prio> (hash: member ->
-- tenant), <base>:fw:<prio> (hash: tenant -> weight), <base>:fv:<prio>
-- (hash: tenant -> tag after its last dispatched entry; field "\tV" = the
-- priority's virtual time), <base>:fg (sorted set: entries dispatched and
-- not yet routed, by expiry ms).
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
-- waiting fleet-wide; free capacity left; k; then the caller's k members
-- dispatched by this call (the arriving one is not among them); then the
-- caller's members dispatched by earlier calls and not yet routed (held:
-- a call whose reply the router lost, a timeout of its routing lane, may
-- have dispatched them; the router hands on those it still holds)}.
-- Complexity: O(workers + routers x workers) for the view; O(log N) per
-- entry queued or dispatched; the dispatch walks at most S = min(capacity +
-- 64, 128) entries over at most S tenants: O(S^2) comparisons, O(S log N)
-- calls; the held members: O(dispatched and not yet routed, fleet-wide).
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
local function tenants(p) return BASE .. ':fk:' .. p end
local function entries(p, t) return BASE .. ':fe:' .. p .. ':' .. t end
local function owners(p) return BASE .. ':fm:' .. p end
local function weights(p) return BASE .. ':fw:' .. p end
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

-- Keeps `keys` for `keep` ms at least.
local function keep_for(keys, keep)
  for _, k in ipairs(keys) do
    if redis.call('PTTL', k) < keep then redis.call('PEXPIRE', k, keep) end
  end
end

-- Where tenant `t`'s next entry starts when it has nothing waiting: the
-- virtual time, or later if its last dispatched entry finishes later.
local function start_tag(p, t)
  local got = redis.call('HMGET', vtimes(p), VFIELD, t)
  return math.max(tonumber(got[1]) or 0, tonumber(got[2]) or 0)
end

-- Tenant `t`'s entry with tag `tag` was dispatched: its next entry starts
-- at `next_tag`; the virtual time reaches `tag`.
local function charge(p, t, tag, next_tag)
  local vt = vtimes(p)
  local v = tonumber(redis.call('HGET', vt, VFIELD)) or 0
  if tag > v then
    v = tag
    redis.call('HSET', vt, VFIELD, tostring(v))
  end
  redis.call('HSET', vt, t, tostring(next_tag))
  -- Forget up to two tenants whose tag the virtual time has passed: their
  -- next start would be the virtual time anyway.
  local some = redis.call('HRANDFIELD', vt, 2, 'WITHVALUES')
  for i = 1, #some, 2 do
    if some[i] ~= VFIELD and some[i] ~= t and (tonumber(some[i + 1]) or 0) <= v then
      redis.call('HDEL', vt, some[i])
    end
  end
  redis.call('PEXPIRE', vt, 600000)
end

-- Takes `member` of tenant `t` out of priority `p`'s queues.
local function unqueue(p, t, member)
  local q = entries(p, t)
  redis.call('ZREM', q, member)
  redis.call('HDEL', owners(p), member)
  if redis.call('ZCARD', q) == 0 then redis.call('ZREM', tenants(p), t) end
end

local function weight_of(p, t)
  local w = tonumber(redis.call('HGET', weights(p), t)) or 1
  if w <= 0 or w ~= w then w = 1 end
  return w
end

local arriving, tag = 0, ''
if ARGV[9] == '1' then
  local member, p, tenant = ARGV[10], math.floor(tonumber(ARGV[11]) or 0), ARGV[12]
  local weight, may_wait = tonumber(ARGV[13]) or 1, ARGV[14] == '1'
  if weight <= 0 or weight ~= weight then weight = 1 end
  -- Entries waiting at this priority or above go first.
  local ahead = 0
  for _, b in ipairs(redis.call('ZRANGEBYSCORE', bands, p, '+inf')) do
    ahead = ahead + redis.call('ZCARD', tenants(b))
  end
  if cap > 0 and ahead == 0 then
    local start = start_tag(p, tenant)
    charge(p, tenant, start, start + 1 / weight)
    grant(member)
    cap = cap - 1
    arriving = 1
  elseif may_wait then
    local q = entries(p, tenant)
    local n = redis.call('ZCARD', q)
    local head
    if n == 0 then
      head = start_tag(p, tenant)
      redis.call('ZADD', tenants(p), head, tenant)
    else
      head = tonumber(redis.call('ZSCORE', tenants(p), tenant)) or start_tag(p, tenant)
    end
    -- By arrival: the time, then the member (unique) breaks ties.
    redis.call('ZADD', q, 'NX', now, member)
    redis.call('HSET', owners(p), member, tenant)
    redis.call('HSET', weights(p), tenant, tostring(weight))
    redis.call('ZADD', bands, p, p)
    -- The keys outlive their last entry's deadline by a minute, so a
    -- waiting room nobody calls again leaves nothing behind.
    local keep = (tonumber(string.match(member, '\t(%d+)$')) or now) - now + 60000
    keep_for({ q, tenants(p), owners(p), weights(p), bands }, keep)
    arriving, tag = 2, tostring(head + n / weight)
  else
    arriving = 3
  end
end

-- Dispatch in the fleet's order while there is capacity: walk the merged
-- order of the tenants' queues (each tenant's entries at its tag, then
-- 1/weight apart); the caller's entries are dispatched here, the others'
-- hold their places for their routers.
local mine = {}
local budget = 64
if cap > 0 then
  for _, b in ipairs(redis.call('ZREVRANGE', bands, 0, -1)) do
    local span = math.min(cap + budget, 128)
    local ts = redis.call('ZRANGE', tenants(b), 0, span - 1, 'WITHSCORES')
    -- Per tenant: its tag as stored (`base`) and the walk's (`tag`), its
    -- weight, its entries read so far, the walk's position among them, and
    -- how many of them this call dispatched.
    local cur = {}
    for i = 1, #ts, 2 do
      local base = tonumber(ts[i + 1]) or 0
      cur[#cur + 1] = { t = ts[i], base = base, tag = base, w = weight_of(b, ts[i]), es = nil, at = 1, served = 0 }
    end
    local steps = 0
    while cap > 0 and budget > 0 and steps < span do
      local best = nil
      for _, c in ipairs(cur) do
        if not c.done and (best == nil or c.tag < best.tag) then best = c end
      end
      if best == nil then break end
      if best.es == nil then
        best.es = redis.call('ZRANGE', entries(b, best.t), 0, span - 1)
      end
      local member = best.es[best.at]
      if member == nil then
        best.done = true
      else
        best.at = best.at + 1
        steps = steps + 1
        if dead(member) then
          unqueue(b, best.t, member)
          budget = budget - 1
        else
          if string.sub(member, 1, #me + 1) == me .. '\t' then
            unqueue(b, best.t, member)
            grant(member)
            mine[#mine + 1] = member
            -- The tenant's stored tag advances by one entry: an entry of
            -- another router ahead of this one keeps its turn.
            -- The virtual time reaches the slot this entry takes in the
            -- stored order (not its place in this walk, which entries of
            -- other routers ahead of it push later): a tenant arriving
            -- with nothing waiting must not start behind slots still owed.
            local slot = best.base + best.served / best.w
            best.served = best.served + 1
            local next_tag = best.base + best.served / best.w
            charge(b, best.t, slot, next_tag)
            if redis.call('ZSCORE', tenants(b), best.t) then
              redis.call('ZADD', tenants(b), next_tag, best.t)
            end
          end
          best.tag = best.tag + 1 / best.w
          cap = cap - 1
        end
      end
    end
    if redis.call('ZCARD', tenants(b)) == 0 then redis.call('ZREM', bands, b) end
    if cap <= 0 or budget <= 0 then break end
  end
end

local waiting = 0
for _, b in ipairs(redis.call('ZRANGE', bands, 0, -1)) do
  waiting = waiting + redis.call('HLEN', owners(b))
end
local out = { saturated and 1 or 0, arriving, tag, waiting, math.max(cap, 0), #mine }
local fresh = {}
for _, m in ipairs(mine) do
  out[#out + 1] = m
  fresh[m] = true
end
if ARGV[9] == '1' then fresh[ARGV[10]] = true end
local prefix = me .. '\t'
for _, m in ipairs(redis.call('ZRANGE', grants, 0, -1)) do
  if not fresh[m] and string.sub(m, 1, #prefix) == prefix then out[#out + 1] = m end
end
return out
