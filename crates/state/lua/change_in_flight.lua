-- change_in_flight.lua: add deltas to this router's in-flight counts for workers:
-- requests, and their uncached prompt tokens still before a first token.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = router_id, then triples: ARGV[3] = worker_id,
-- ARGV[4] = request delta, ARGV[5] = prefill token delta, ARGV[6] =
-- worker_id, ... (a sharded model's other parts get a batch of every
-- worker's net change).
-- A count never goes below zero; a zero count is removed. Unknown workers
-- are skipped.
-- Returns the router's new request count for the first worker (0 when
-- unknown).
-- Complexity: O(triples).
local first = nil
for i = 3, #ARGV - 2, 3 do
  local idx = redis.call('HGET', KEYS[1], ARGV[i])
  local n = 0
  if idx then
    local requests, tokens = tonumber(ARGV[i + 1]) or 0, tonumber(ARGV[i + 2]) or 0
    if requests ~= 0 or not first then n = view_count_add(inflight_field(idx, ARGV[2]), requests) end
    if tokens ~= 0 then view_count_add(prefill_field(idx, ARGV[2]), tokens) end
  end
  first = first or n
end
return first or 0
