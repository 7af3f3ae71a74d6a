-- deregister.lua: drain a worker: out of routing now, entries purged later.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id
-- Returns the incarnation queued for purge, or 0 when the worker was unknown.
-- The entries themselves are removed by purge.lua in bounded batches.
-- Complexity: O(1).
local idx = redis.call('HGET', KEYS[1], ARGV[2])
if not idx then return 0 end
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('ZREM', BASE .. ':leases', idx)
redis.call('HSET', worker_key(idx), 'lease_until', 0)
view_refresh(idx)
redis.call('SADD', BASE .. ':purge', idx)
return tonumber(idx)
