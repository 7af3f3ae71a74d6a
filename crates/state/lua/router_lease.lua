-- router_lease.lua: renew (or, with lease_ms = 0, end) a router's lease, and
-- reconcile its in-flight gauges with its own ledger.
-- A router's share of the in-flight gauges counts only while its lease lives,
-- so a crashed router's requests stop weighing on workers when it expires.
-- A process's first lease (fresh = 1) also drops the in-flight counts left
-- under its id: a router restarted with the same --router-id (a pod name,
-- say) has nothing in flight, and its predecessor's requests died with it.
-- Reconciliation (see in_flight.rs): for every incarnation in ids, each of
-- this router's two gauges (requests, and their prefill tokens) is set to
-- the ledger's figure when below it, and lowered by at most the excess seen
-- at the previous renewal when above it (a count whose route call ran after
-- the router gave up on it, or whose release was lost). Incarnations
-- without an entry hold 0.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = router_id, ARGV[3] = lease_ms, ARGV[4] = fresh
-- (1 or 0), ARGV[5] = n, then n quintuples (worker_id, requests this
-- router holds in flight to it, their excess seen last time, prefill
-- tokens it holds, their excess seen last time).
-- Returns {live routers, then triples (worker_id, request excess now,
-- prefill token excess now)}.
-- Complexity: O(log R + workers).
local now = now_ms()
local router = ARGV[2]
if ARGV[4] == '1' then view_drop_router(router) end
local expiry = now + tonumber(ARGV[3])
redis.call('ZADD', BASE .. ':routers', expiry, router)
redis.call('HSET', view_key(), ROUTER_FIELD .. router, expiry)
local out = { redis.call('ZCOUNT', BASE .. ':routers', string.format('(%d', now), '+inf') }
if tonumber(ARGV[3]) <= 1 then return out end

local held, seen = {}, {}
for i = 0, tonumber(ARGV[5] or '0') - 1 do
  local at = 6 + 5 * i
  local w = ARGV[at]
  held[w] = { tonumber(ARGV[at + 1]), tonumber(ARGV[at + 3]) }
  seen[w] = { tonumber(ARGV[at + 2]), tonumber(ARGV[at + 4]) }
end

-- Brings one gauge toward `want`; returns the excess left.
local function reconcile(field, want, seen_excess)
  local stored = tonumber(redis.call('HGET', view_key(), field) or '0')
  if stored < want then
    redis.call('HSET', view_key(), field, want)
    return 0
  end
  local excess = stored - want
  local drop = math.min(excess, seen_excess or 0)
  if drop > 0 then
    if stored - drop <= 0 then
      redis.call('HDEL', view_key(), field)
    else
      redis.call('HSET', view_key(), field, stored - drop)
    end
    excess = excess - drop
  end
  return excess
end

local ids = redis.call('HGETALL', KEYS[1])
for i = 1, #ids, 2 do
  local w, idx = ids[i], ids[i + 1]
  local want, was = held[w] or {}, seen[w] or {}
  local requests = reconcile(inflight_field(idx, router), want[1] or 0, was[1])
  local tokens = reconcile(prefill_field(idx, router), want[2] or 0, was[2])
  if requests > 0 or tokens > 0 then
    out[#out + 1] = w
    out[#out + 1] = requests
    out[#out + 1] = tokens
  end
end
return out
