-- inflight.lua: add delta to this router's in-flight count for a worker.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = router_id, ARGV[3] = worker_id, ARGV[4] = delta
-- The count never goes below zero; a zero count is removed.
-- Returns the router's new count (0 when the worker is unknown).
-- Complexity: O(1).
local idx = redis.call('HGET', KEYS[1], ARGV[3])
if not idx then return 0 end
local key, field = view_key(), inflight_field(idx, ARGV[2])
local n = redis.call('HINCRBY', key, field, tonumber(ARGV[4]))
if n <= 0 then
  redis.call('HDEL', key, field)
  return 0
end
return n
