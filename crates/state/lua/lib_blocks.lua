-- lib_blocks.lua: a worker's reports about its blocks, applied: blocks it
-- now caches (store_blocks) and blocks it evicted (evict_blocks). stored.lua
-- and evict.lua run one of them; apply_events.lua runs several in the order
-- the worker saw them. Each reads what it judges by (the worker's
-- membership, the sync target) when it starts and writes its entries and
-- sets before it returns, so two in one call act as two calls would; the
-- digest terms they change are gathered in the caller's accumulator `acc`
-- (XOR: the order of toggles does not matter), which the caller flushes
-- once (digest_flush). `hashes` are distinct (unique_args).
-- KEYS/ARGV: none of its own; every key comes from BASE, as in lib.lua.
-- Returns: see each function. Complexity: O(n) in the hashes given.

-- Inserts missing entries of `hashes` and promotes speculative ones, as
-- confirmed on `tier` ('c', 'h' or 'd') until `exp` (seconds); confirmed
-- ones get the later of the two expiries and take `tier`. A non-GPU tier
-- marks the worker record `tiered` (sync_patch.lua compares tiers then).
-- Digest terms follow the confirmed membership and its tiers (during a
-- sync, the target s:<idx> and its tiers st:<idx>, which take the tier too).
-- Returns inserted, promoted, refreshed. O(n): one forward read and write
-- per hash, set and digest updates batched.
local function store_blocks(idx, ws, hashes, tier, exp, acc)
  local inserted, promoted, refreshed = 0, 0, 0
  local in_target = ws.syncing and set_call('SMISMEMBER', sync_target_key(idx), hashes)
  local target_kinds = ws.syncing and set_call('HMGET', target_tier_key(idx), hashes)
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
      if was then digest_toggle(acc, h, was) end
      digest_toggle(acc, h, tier)
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
  return inserted, promoted, refreshed
end

-- Removes the worker's entries of `hashes`, whatever their tier (a block
-- that leaves one medium but stays on another is reported stored on that
-- one); hashes it does not hold are ignored. Confirmed ones leaving the
-- membership are toggled out of the digests with their tier (during a
-- sync, those leaving the target, with the target's tier). Returns the
-- number of entries removed. O(n): one membership probe for the batch,
-- then a forward read and write per held hash.
local function evict_blocks(idx, ws, hashes, acc)
  local member = set_call('SMISMEMBER', reverse_key(idx), hashes)
  local in_target = ws.syncing and set_call('SMISMEMBER', sync_target_key(idx), hashes)
  local target_kinds = ws.syncing and set_call('HMGET', target_tier_key(idx), hashes)
  local removed = 0
  for i, h in ipairs(hashes) do
    local kind = member[i] == 1 and fwd_remove(h, idx)
    if kind then removed = removed + 1 end
    if in_target then
      if in_target[i] == 1 then digest_toggle(acc, h, target_kinds[i] or 'c') end
    elseif CONFIRMED[kind] then
      digest_toggle(acc, h, kind)
    end
  end
  set_call('SREM', reverse_key(idx), hashes)
  set_call('SREM', spec_key(idx), hashes)
  if ws.syncing then
    set_call('SREM', sync_target_key(idx), hashes)
    set_call('HDEL', target_tier_key(idx), hashes)
  end
  return removed
end
