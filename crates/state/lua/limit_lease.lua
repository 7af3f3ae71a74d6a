-- limit_lease.lua: renew this router's lease on its requests in flight for
-- a tenant, and set its count to the router's own ledger (which counts a
-- request from before its admission call until after its release call, so
-- the ledger is never below what the router really holds: a lost release
-- or increment is healed here). A count of 0 ends the lease.
-- KEYS[1] = <base>:ids (the library's contract; not touched)
-- ARGV[1] = base, ARGV[2] = router_id, ARGV[3] = lease_ms, ARGV[4] =
-- requests the router holds in flight for the tenant.
-- Returns the tenant's requests in flight over every live router.
-- Complexity: O(routers holding the tenant's requests).
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local router, lease_ms, held = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if not (lease_ms and held) then
  return redis.error_reply('ERR limit_lease: numeric arguments expected')
end
local cc_key, ccl_key = BASE .. ':cc', BASE .. ':ccl'
if held > 0 then
  redis.call('HSET', cc_key, router, string.format('%d', held))
  redis.call('ZADD', ccl_key, now_ms + lease_ms, router)
  redis.call('PEXPIRE', cc_key, 2 * lease_ms)
  redis.call('PEXPIRE', ccl_key, 2 * lease_ms)
else
  redis.call('HDEL', cc_key, router)
  redis.call('ZREM', ccl_key, router)
end
local live = {}
for _, r in ipairs(redis.call('ZRANGEBYSCORE', ccl_key, string.format('(%d', now_ms), '+inf')) do live[r] = true end
local total = 0
local all = redis.call('HGETALL', cc_key)
for i = 1, #all, 2 do
  if live[all[i]] then total = total + (tonumber(all[i + 1]) or 0) end
end
return total
