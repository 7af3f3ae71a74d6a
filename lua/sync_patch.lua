-- sync_patch.lua: one bounded step of applying a committed sync.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = idx (worker incarnation), ARGV[3] = budget (hashes per step)
-- Phase "add" walks the target s:<idx>: missing entries are inserted as
-- confirmed, speculative ones promoted. Phase "remove" walks the reverse map
-- r:<idx>: entries not in the target are removed, except live speculative
-- entries (routed requests the snapshot predates), which join the target.
-- At the end r:<idx> equals the target, which is dropped. Safe to call from
-- several routers at once: the cursor lives in the worker record.
-- Returns {0, hashes visited} while steps remain, then {1, blocks the
-- worker holds} once the sync is fully applied (also when none was pending).
-- Complexity: O(budget) per call; O(old + new) for a whole sync.
local idx, budget = ARGV[2], tonumber(ARGV[3])
local wkey = worker_key(idx)
local f = redis.call('HMGET', wkey, 'syncing', 'patch_phase', 'patch_cursor', 'synced_until')
if f[1] ~= '1' then return { 1, redis.call('SCARD', reverse_key(idx)) } end
local now = now_ms()
local phase, cursor = f[2], f[3]
local target, reverse = sync_target_key(idx), reverse_key(idx)
local res, visited
if phase == 'add' then
  local exp = math.ceil((tonumber(f[4]) or now) / 1000)
  res = redis.call('SSCAN', target, cursor, 'COUNT', budget)
  visited = #res[2]
  for _, h in ipairs(res[2]) do
    local list = fwd_get(h)
    local j, e = find_entry(list, idx)
    if not e or e.kind == 's' then
      if j then table.remove(list, j) end
      list[#list + 1] = { idx = idx, kind = 'c', exp = exp }
      fwd_put(h, list)
      redis.call('SADD', reverse, h)
    end
  end
  if res[1] == '0' then
    redis.call('HSET', wkey, 'patch_phase', 'remove', 'patch_cursor', '0', 'patch_ms', now)
  else
    redis.call('HSET', wkey, 'patch_cursor', res[1], 'patch_ms', now)
  end
  return { 0, visited }
end
res = redis.call('SSCAN', reverse, cursor, 'COUNT', budget)
visited = #res[2]
for _, h in ipairs(res[2]) do
  if redis.call('SISMEMBER', target, h) == 0 then
    local list = fwd_get(h)
    local j, e = find_entry(list, idx)
    if e and e.kind == 's' and e.exp * 1000 > now then
      redis.call('SADD', target, h)
    else
      if j then
        table.remove(list, j)
        fwd_put(h, list)
      end
      redis.call('SREM', reverse, h)
    end
  end
end
if res[1] == '0' then
  redis.call('DEL', target)
  redis.call('HSET', wkey, 'syncing', 0, 'patch_ms', now)
  redis.call('HDEL', wkey, 'patch_phase', 'patch_cursor')
  return { 1, redis.call('SCARD', reverse) }
end
redis.call('HSET', wkey, 'patch_cursor', res[1], 'patch_ms', now)
return { 0, visited }
