-- stored.lua: the worker confirms that it now caches these blocks, with the
-- best tier it holds them on.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = confirmed ttl_ms,
-- ARGV[4] = the tier, as an entry kind: 'c' GPU, 'h' CPU, 'd' disk;
-- ARGV[5..] = block hashes (16 lower-case hex digits).
-- Inserts missing entries and promotes speculative ones, with the confirmed
-- TTL; confirmed entries get their expiry refreshed and take the tier given
-- (a block demoted to the CPU, or loaded back onto the GPU, is reported
-- again with its new tier). A non-GPU tier marks the worker record
-- `tiered`, so that a full sync compares tiers (sync_patch.lua).
-- Digests (dg:<idx>) follow the confirmed membership and its tiers: a
-- joining hash is XORed in with the tier, a tier change swaps the two
-- tiers' terms; during a sync, against the target s:<idx> and its tiers
-- st:<idx>, which take the new tier too. A hash listed twice counts once.
-- Returns {inserted, promoted, refreshed}, or the error "ERR unknown worker".
-- Complexity: O(n) for n hashes; one forward read and write per hash (one
-- bucket key, one entry search), set and digest updates batched. Callers
-- send at most 64 hashes per call.
local tier = ARGV[4]
if not CONFIRMED[tier] then return redis.error_reply("ERR the tier must be 'c', 'h' or 'd'") end
local bad = check_hashes(5)
if bad then return bad end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
local ws = worker_state(idx)
local exp = expiry_s(now, tonumber(ARGV[3]))
local inserted, promoted, refreshed = 0, 0, 0
local hashes = unique_args(5)
local in_target = ws.syncing and set_call('SMISMEMBER', sync_target_key(idx), hashes)
local target_kinds = ws.syncing and set_call('HMGET', target_tier_key(idx), hashes)
local joined = {}
-- The new entry, formatted once: an older expiry is the rule.
local token = idx .. tier .. string.format('%d', exp)
for i, h in ipairs(hashes) do
  local key = bucket_key(h)
  local v = redis.call('HGET', key, h) or nil
  local kind, old, s, e = entry_of(v, idx)
  if not kind then
    inserted = inserted + 1
  elseif kind == 's' then
    promoted = promoted + 1
  else
    refreshed = refreshed + 1
  end
  -- The term the digests hold for h (none, or its confirmed tier's).
  local was = CONFIRMED[kind] and kind
  if in_target then was = in_target[i] == 1 and (target_kinds[i] or 'c') end
  if was ~= tier then
    if was then digest_toggle(joined, h, was) end
    digest_toggle(joined, h, tier)
  end
  local entry = token
  if old and old > exp then entry = idx .. tier .. string.format('%d', old) end
  redis.call('HSET', key, h, splice(v, s, e, entry))
end
set_call('SADD', reverse_key(idx), hashes)
set_call('SREM', spec_key(idx), hashes)
if ws.syncing then
  set_call('SADD', sync_target_key(idx), hashes)
  if tier == 'c' then
    set_call('HDEL', target_tier_key(idx), hashes)
  else
    local pairs_ = {}
    for _, h in ipairs(hashes) do pairs_[#pairs_ + 1] = h; pairs_[#pairs_ + 1] = tier end
    set_call('HSET', target_tier_key(idx), pairs_)
  end
end
if tier ~= 'c' and #hashes > 0 then redis.call('HSET', worker_key(idx), 'tiered', 1) end
digest_flush(digest_key(idx), joined)
return { inserted, promoted, refreshed }
