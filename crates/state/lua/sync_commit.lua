-- sync_commit.lua: make a staged snapshot the worker's block set, atomically.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = sync_id, ARGV[4] = confirmed ttl_ms
-- The staged set becomes the sync target s:<idx>; from this moment lookups use
-- it as the worker's membership, and sync_patch.lua brings the forward and
-- reverse maps in line with it in bounded steps. Every confirmed entry the
-- snapshot keeps is refreshed through the worker's synced_until. The
-- snapshot's digests (stage_dg, from sync_stage.lua) become dg:<idx>, its
-- tiers (stage_t) the target's st:<idx>; a snapshot with blocks off the GPU
-- marks the worker `tiered` (sync_patch.lua then compares tiers).
-- A sync_id already committed (the record's last_sync) is not committed
-- again: a retried commit returns {1, blocks held, idx} and changes nothing.
-- Returns {1, target size, idx} when committed, {0, 0, idx} when the previous
-- sync is still being patched (run sync_patch.lua, then retry),
-- "ERR sync aborted" when a chunk of it was refused (sync_abort.lua; nothing
-- changes), or "ERR unknown worker".
-- Complexity: O(1).
if not string.match(ARGV[3], '^[%w_%-]+$') or #ARGV[3] > 64 then
  return redis.error_reply('ERR bad sync_id')
end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
-- Committing the same sync twice (a retry after a lost reply) is a no-op.
if redis.call('HGET', worker_key(idx), 'last_sync') == ARGV[3] then
  return { 1, redis.call('SCARD', reverse_key(idx)), tonumber(idx) }
end
local stage, stage_dg, stage_t = stage_keys(idx, ARGV[3])
if stage_aborted(stage) then return redis.error_reply('ERR sync aborted') end
if worker_state(idx).syncing then return { 0, 0, tonumber(idx) } end
local target = sync_target_key(idx)
if redis.call('EXISTS', stage_t) == 1 then
  redis.call('RENAME', stage_t, target_tier_key(idx))
  redis.call('PERSIST', target_tier_key(idx))
  redis.call('HSET', worker_key(idx), 'tiered', 1)
else
  redis.call('DEL', target_tier_key(idx))
end
if redis.call('EXISTS', stage) == 1 then
  redis.call('RENAME', stage, target)
  redis.call('PERSIST', target)
else
  redis.call('DEL', target)
end
-- The snapshot's digests become the membership's: the patch makes the
-- confirmed entries equal to the target, and reports meanwhile update both.
if redis.call('EXISTS', stage_dg) == 1 then
  redis.call('RENAME', stage_dg, digest_key(idx))
  redis.call('PERSIST', digest_key(idx))
else
  redis.call('DEL', digest_key(idx))
end
redis.call('HSET', worker_key(idx), 'last_sync', ARGV[3], 'syncing', 1, 'patch_phase', 'add', 'patch_cursor', '0',
  'patch_ms', now, 'synced_until', now + tonumber(ARGV[4]))
view_refresh(idx)
return { 1, redis.call('SCARD', target), tonumber(idx) }
