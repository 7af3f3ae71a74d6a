-- sync_patch.lua: one bounded step of applying a committed sync.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = idx (worker incarnation), ARGV[3] = budget (hashes per step)
-- Phase "add" walks the target s:<idx>: blocks the worker had no entry for
-- are inserted as confirmed, speculative ones promoted, each with its tier
-- from the target's tiers st:<idx> (absent: GPU); for a worker whose
-- entries may be off the GPU (record field `tiered`: a stored report or a
-- snapshot named another tier), the other blocks' entries are read and
-- given the target's tier where it differs. Phase "remove" walks
-- the reverse map r:<idx>: entries not in the target are removed, except
-- live speculative entries (routed requests the snapshot predates), which
-- stay. Unchanged blocks cost one batched membership probe and no forward
-- access (for a `tiered` worker, one forward read). At the end r:<idx>
-- minus the speculative entries equals the target, with its tiers, and
-- both are dropped. The digests (dg:<idx>) already describe the
-- target (sync_commit.lua), so no step changes them. Safe to call from several routers at once: the cursor lives in
-- the worker record.
-- Returns {0, hashes visited} while steps remain, then {1, blocks the
-- worker holds} once the sync is fully applied (also when none was pending).
-- Complexity: O(budget) per call; O(old + new) for a whole sync.
local idx, budget = ARGV[2], tonumber(ARGV[3])
local wkey = worker_key(idx)
local f = redis.call('HMGET', wkey, 'syncing', 'patch_phase', 'patch_cursor', 'synced_until', 'tiered')
local target, reverse, spec = sync_target_key(idx), reverse_key(idx), spec_key(idx)
if f[1] ~= '1' then return { 1, redis.call('SCARD', reverse) } end
local now = now_ms()
local phase, cursor = f[2], f[3]
local res = redis.call('SSCAN', phase == 'add' and target or reverse, cursor, 'COUNT', budget)
local batch = res[2]
if phase == 'add' then
  local exp = math.ceil((tonumber(f[4]) or now) / 1000)
  local in_rev = set_call('SMISMEMBER', reverse, batch)
  local in_spec = set_call('SMISMEMBER', spec, batch)
  local tiered = f[5] == '1'
  local kinds = tiered and set_call('HMGET', target_tier_key(idx), batch) or {}
  local confirmed = {}
  for i, h in ipairs(batch) do
    local want = kinds[i] or 'c'
    if in_rev[i] == 0 or in_spec[i] == 1 then
      fwd_write(h, with_entry(fwd_read(h), idx, want, exp))
      confirmed[#confirmed + 1] = h
    elseif tiered then
      local v = fwd_read(h)
      if entry_of(v, idx) ~= want then fwd_write(h, with_entry(v, idx, want, exp)) end
    end
  end
  set_call('SADD', reverse, confirmed)
  set_call('SREM', spec, confirmed)
  if res[1] == '0' then
    redis.call('HSET', wkey, 'patch_phase', 'remove', 'patch_cursor', '0', 'patch_ms', now)
  else
    redis.call('HSET', wkey, 'patch_cursor', res[1], 'patch_ms', now)
  end
  return { 0, #batch }
end
local in_target = set_call('SMISMEMBER', target, batch)
local drop = {}
for i, h in ipairs(batch) do
  if in_target[i] == 0 then
    local v = fwd_read(h)
    local kind, exp = entry_of(v, idx)
    if not (kind == 's' and exp * 1000 > now) then
      if kind then fwd_write(h, without_entry(v, idx)) end
      drop[#drop + 1] = h
    end
  end
end
set_call('SREM', reverse, drop)
set_call('SREM', spec, drop)
if res[1] == '0' then
  redis.call('DEL', target, target_tier_key(idx))
  redis.call('HSET', wkey, 'syncing', 0, 'patch_ms', now)
  redis.call('HDEL', wkey, 'patch_phase', 'patch_cursor')
  view_refresh(idx)
  return { 1, redis.call('SCARD', reverse) }
end
redis.call('HSET', wkey, 'patch_cursor', res[1], 'patch_ms', now)
return { 0, #batch }
