-- router_lease.lua: renew (or, with lease_ms = 0, end) a router's lease.
-- A router's share of the in-flight gauges counts only while its lease lives,
-- so a crashed router's requests stop weighing on workers when it expires.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = router_id, ARGV[3] = lease_ms
-- Returns the number of live routers. Complexity: O(log R).
local now = now_ms()
redis.call('ZADD', BASE .. ':routers', now + tonumber(ARGV[3]), ARGV[2])
return redis.call('ZCOUNT', BASE .. ':routers', string.format('(%d', now), '+inf')
