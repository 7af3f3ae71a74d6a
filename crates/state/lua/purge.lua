-- purge.lua: remove the entries of dead incarnations (deregistered, lease
-- expired, replaced), through their reverse maps, in bounded batches.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = budget (entries per call)
-- Safe to call from several routers at once (SPOP hands each entry to one).
-- Returns {entries removed, incarnations still queued}.
-- Complexity: O(budget).
local budget = tonumber(ARGV[2])
local removed = 0
while budget > 0 do
  local idx = redis.call('SRANDMEMBER', BASE .. ':purge')
  if not idx then break end
  local batch = redis.call('SPOP', reverse_key(idx), budget)
  for _, h in ipairs(batch) do
    if fwd_remove(h, idx) then removed = removed + 1 end
  end
  budget = budget - #batch
  if redis.call('EXISTS', reverse_key(idx)) == 0 then
    redis.call('DEL', worker_key(idx), spec_key(idx), sync_target_key(idx), target_tier_key(idx),
      digest_key(idx))
    view_drop(idx)
    redis.call('SREM', BASE .. ':purge', idx)
  end
  budget = budget - 1
end
return { removed, redis.call('SCARD', BASE .. ':purge') }
