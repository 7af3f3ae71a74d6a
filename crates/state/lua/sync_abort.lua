-- sync_abort.lua: abort a staged sync whose chunk was refused (by the
-- caller's checks: a chunk too large, tiers or families not matching its
-- hashes; sync_stage.lua aborts by itself when the snapshot grows too large).
-- What was staged is dropped, and its later chunks and its commit are
-- refused ("ERR sync aborted") until the stage expires: a worker's index is
-- never replaced by part of a snapshot (stage_abort in lib_sync.lua).
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = sync_id, ARGV[4] = staging ttl_ms
-- Returns 1 when aborted, 0 for a sync the worker already committed (nothing
-- changes), or "ERR unknown worker".
-- Complexity: O(n) for the n hashes staged so far (deleted).
if not string.match(ARGV[3], '^[%w_%-]+$') or #ARGV[3] > 64 then
  return redis.error_reply('ERR bad sync_id')
end
local idx = live_idx(ARGV[2], now_ms())
if not idx then return redis.error_reply('ERR unknown worker') end
if redis.call('HGET', worker_key(idx), 'last_sync') == ARGV[3] then return 0 end
stage_abort(idx, ARGV[3], tonumber(ARGV[4]))
return 1
