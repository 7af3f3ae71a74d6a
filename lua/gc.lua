-- gc.lua: bounded housekeeping, safe to run from every router at once.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = budget (entries swept per call),
-- ARGV[3] = stall_ms (a sync patch idle that long is reported as stalled)
-- 1. Incarnations whose lease expired leave the id map and join the purge queue.
-- 2. Expired routers' in-flight counts are dropped.
-- 3. One slice of one live worker's reverse map is swept: expired entries
--    (and reverse members without a forward entry) are removed. The sweep
--    position (gc hash: idx, cursor) moves round-robin over live workers.
-- Returns {leases expired, routers dropped, entries swept, stalled idx...};
-- the caller drives sync_patch.lua for each stalled incarnation.
-- Complexity: O(budget + live workers).
local budget, stall_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local leases, purge, gckey = BASE .. ':leases', BASE .. ':purge', BASE .. ':gc'

local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, 64)
for _, idx in ipairs(expired) do
  local id = redis.call('HGET', worker_key(idx), 'id')
  if id and redis.call('HGET', KEYS[1], id) == idx then redis.call('HDEL', KEYS[1], id) end
  redis.call('ZREM', leases, idx)
  redis.call('SADD', purge, idx)
end

local live = live_idxs(now)
local dead_routers = redis.call('ZRANGEBYSCORE', BASE .. ':routers', '-inf', now, 'LIMIT', 0, 16)
for _, r in ipairs(dead_routers) do
  for _, idx in ipairs(live) do redis.call('HDEL', inflight_key(idx), r) end
  redis.call('ZREM', BASE .. ':routers', r)
end

local stalled, swept = {}, 0
local order = {}
for _, idx in ipairs(live) do
  local ws = worker_state(idx)
  if ws.syncing then
    local at = tonumber(redis.call('HGET', worker_key(idx), 'patch_ms')) or 0
    if now - at > stall_ms then stalled[#stalled + 1] = idx end
  else
    order[#order + 1] = tonumber(idx)
  end
end
table.sort(order)
if #order > 0 then
  local g = redis.call('HMGET', gckey, 'idx', 'cursor')
  local cur, cursor = tonumber(g[1]), g[2] or '0'
  local pick = nil
  for _, i in ipairs(order) do
    if cur and i == cur then pick = i break end
  end
  if not pick then
    cursor = '0'
    for _, i in ipairs(order) do
      if not cur or i > cur then pick = i break end
    end
    pick = pick or order[1]
  end
  local idx = tostring(pick)
  local ws = worker_state(idx)
  local res = redis.call('SSCAN', reverse_key(idx), cursor, 'COUNT', budget)
  for _, h in ipairs(res[2]) do
    local list = fwd_get(h)
    local j, e = find_entry(list, idx)
    if not e or not entry_alive(e, ws, now) then
      if j then
        table.remove(list, j)
        fwd_put(h, list)
      end
      redis.call('SREM', reverse_key(idx), h)
      swept = swept + 1
    end
  end
  if res[1] == '0' then
    local nxt = order[1]
    for _, i in ipairs(order) do
      if i > pick then nxt = i break end
    end
    redis.call('HSET', gckey, 'idx', nxt, 'cursor', '0')
  else
    redis.call('HSET', gckey, 'idx', pick, 'cursor', res[1])
  end
end
local out = { #expired, #dead_routers, swept }
for _, idx in ipairs(stalled) do out[#out + 1] = tonumber(idx) end
return out
