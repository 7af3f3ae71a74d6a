-- evict.lua: remove a batch of blocks the worker evicted, from both maps.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3..] = block hashes (16 hex digits).
-- Hashes the worker does not hold are ignored (reports may repeat). An
-- eviction removes the entry whatever its tier: a worker reports a block
-- that leaves one medium but stays on another as stored on that one.
-- Confirmed ones leaving the membership are XORed out of its digests with
-- their tier (dg:<idx>; during a sync, those leaving the target s:<idx>,
-- with the target's tier from st:<idx>). A hash listed twice counts once.
-- Returns the number of entries removed, or the error "ERR unknown worker".
-- Complexity: O(n) for n hashes: one membership probe for the batch, then a
-- forward read and write per held hash. Callers send at most 64 per call.
local bad = check_hashes(3)
if bad then return bad end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
local ws = worker_state(idx)
local hashes = unique_args(3)
local member = set_call('SMISMEMBER', reverse_key(idx), hashes)
local in_target = ws.syncing and set_call('SMISMEMBER', sync_target_key(idx), hashes)
local target_kinds = ws.syncing and set_call('HMGET', target_tier_key(idx), hashes)
local removed, left = 0, {}
for i, h in ipairs(hashes) do
  local kind = member[i] == 1 and fwd_remove(h, idx)
  if kind then removed = removed + 1 end
  if in_target then
    if in_target[i] == 1 then digest_toggle(left, h, target_kinds[i] or 'c') end
  elseif CONFIRMED[kind] then
    digest_toggle(left, h, kind)
  end
end
set_call('SREM', reverse_key(idx), hashes)
set_call('SREM', spec_key(idx), hashes)
if ws.syncing then
  set_call('SREM', sync_target_key(idx), hashes)
  set_call('HDEL', target_tier_key(idx), hashes)
end
digest_flush(digest_key(idx), left)
return removed
