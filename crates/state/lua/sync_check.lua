-- sync_check.lua: the cheap half of anti-entropy. A worker sends the
-- digests of its snapshot; if they equal those of its confirmed membership
-- (dg:<idx>, kept by every script that changes it), nothing differs and
-- the sync is done here: synced_until moves on, as a full sync's commit
-- would move it, keeping every confirmed entry alive. Otherwise the caller
-- sends the full snapshot (sync_stage, sync_commit, sync_patch).
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = confirmed ttl_ms,
-- ARGV[4] = the 256 digests, one string of 256 x 16 lower-case hex digits
-- (bucket b = hashes whose first two hex digits are b, in order 00..ff;
-- each the XOR of its hashes, 0 for none).
-- Returns {1} when equal (synced_until renewed), {0, differing buckets...}
-- otherwise (also while a previous sync is still being applied, with no
-- bucket listed), or "ERR unknown worker".
-- Complexity: O(256): one HGETALL of at most 256 fields.
local d = ARGV[4]
if not d or #d ~= 4096 or sfind(d, '[^0-9a-f]') then
  return redis.error_reply('ERR digests must be 4096 lower-case hex digits')
end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
if worker_state(idx).syncing then return { 0 } end
local flat = redis.call('HGETALL', digest_key(idx))
local have = {}
for i = 1, #flat, 2 do have[flat[i]] = flat[i + 1] end
local zero = '0000000000000000'
local out = { 0 }
for b = 0, 255 do
  local field = HEX[b]
  local want = ssub(d, 16 * b + 1, 16 * b + 16)
  if (have[field] or zero) ~= want then out[#out + 1] = field end
end
if #out > 1 then return out end
redis.call('HSET', worker_key(idx), 'synced_until', now + tonumber(ARGV[3]))
view_refresh(idx)
return { 1 }
