-- router_lease.lua: renew (or, with lease_ms = 0, end) a router's lease.
-- A router's share of the in-flight gauges counts only while its lease lives,
-- so a crashed router's requests stop weighing on workers when it expires.
-- A process's first lease (fresh = 1) also drops the in-flight counts left
-- under its id: a router restarted with the same --router-id (a pod name,
-- say) has nothing in flight, and its predecessor's requests died with it.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = router_id, ARGV[3] = lease_ms, ARGV[4] = fresh
-- (1 or 0).
-- Returns the number of live routers. Complexity: O(log R), plus
-- O(workers) when fresh.
local now = now_ms()
if ARGV[4] == '1' then view_drop_router(ARGV[2]) end
local expiry = now + tonumber(ARGV[3])
redis.call('ZADD', BASE .. ':routers', expiry, ARGV[2])
redis.call('HSET', view_key(), ROUTER_FIELD .. ARGV[2], expiry)
return redis.call('ZCOUNT', BASE .. ':routers', string.format('(%d', now), '+inf')
