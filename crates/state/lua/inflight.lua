-- inflight.lua: add deltas to this router's in-flight counts for workers.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = router_id, then pairs: ARGV[3] = worker_id,
-- ARGV[4] = delta, ARGV[5] = worker_id, ARGV[6] = delta, ... (a sharded
-- model's other parts get a batch of every worker's net change).
-- A count never goes below zero; a zero count is removed. Unknown workers
-- are skipped.
-- Returns the router's new count for the first worker (0 when unknown).
-- Complexity: O(pairs).
local key, first = view_key(), nil
for i = 3, #ARGV - 1, 2 do
  local idx = redis.call('HGET', KEYS[1], ARGV[i])
  local n = 0
  if idx then
    local field = inflight_field(idx, ARGV[2])
    n = redis.call('HINCRBY', key, field, tonumber(ARGV[i + 1]) or 0)
    if n <= 0 then
      redis.call('HDEL', key, field)
      n = 0
    end
  end
  first = first or n
end
return first or 0
