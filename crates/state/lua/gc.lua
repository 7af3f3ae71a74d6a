-- gc.lua: bounded housekeeping, safe to run from every router at once.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = budget (entries swept per call),
-- ARGV[3] = stall_ms (a sync patch idle that long is reported as stalled),
-- ARGV[4] = forget_ms (a model with no incarnation that long is forgotten)
-- 1. Incarnations whose lease expired leave the id map and join the purge queue.
-- 2. Expired routers' in-flight counts are dropped.
-- 3. One slice of one live worker's entries is swept for expiry: its
--    speculative set sp:<idx> always, then its reverse map r:<idx> only when
--    no recent sync keeps its confirmed entries alive. The position (gc hash:
--    idx, phase, cursor) moves round-robin over live, non-syncing workers.
-- 4. A registered model (seq exists) with no incarnation left (none
--    leased, none to purge) notes
--    since when in its gc hash (empty_since); past forget_ms its remaining
--    keys are deleted (its routers' leases, the view, seq, gc) and 1 is
--    returned as `forgotten`: the caller removes it from <ns>:models.
-- Returns {leases expired, routers dropped, entries swept, forgotten (0/1),
-- stalled idx...}; the caller drives sync_patch.lua for each stalled
-- incarnation.
-- Complexity: O(budget + live workers).
local budget, stall_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local leases, gckey = BASE .. ':leases', BASE .. ':gc'

local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, 64)
for _, idx in ipairs(expired) do
  local id = redis.call('HGET', worker_key(idx), 'id')
  if id and redis.call('HGET', KEYS[1], id) == idx then redis.call('HDEL', KEYS[1], id) end
  redis.call('ZREM', leases, idx)
  redis.call('SADD', BASE .. ':purge', idx)
end

local live = live_leases(now)
local dead_routers = redis.call('ZRANGEBYSCORE', BASE .. ':routers', '-inf', now, 'LIMIT', 0, 16)
for _, r in ipairs(dead_routers) do
  view_drop_router(r)
  redis.call('ZREM', BASE .. ':routers', r)
end

local stalled, order = {}, {}
for i = 1, #live, 2 do
  local idx = live[i]
  local f = redis.call('HMGET', worker_key(idx), 'syncing', 'patch_ms')
  if f[1] == '1' then
    if now - (tonumber(f[2]) or 0) > stall_ms then stalled[#stalled + 1] = tonumber(idx) end
  else
    order[#order + 1] = tonumber(idx)
  end
end
table.sort(order)

-- Drops expired entries among one SSCAN slice of `key`; returns the cursor.
-- Expired confirmed entries leave the worker's digests (dg:<idx>), with
-- their tier.
local swept = 0
local function sweep(idx, key, cursor, ws)
  local res = redis.call('SSCAN', key, cursor, 'COUNT', budget)
  local drop, left = {}, {}
  for _, h in ipairs(res[2]) do
    local v = fwd_read(h)
    local kind, exp = entry_of(v, idx)
    if not kind or not alive(kind, exp, ws, now) then
      if kind then fwd_write(h, without_entry(v, idx)) end
      if CONFIRMED[kind] then digest_toggle(left, h, kind) end
      drop[#drop + 1] = h
    end
  end
  set_call('SREM', reverse_key(idx), drop)
  set_call('SREM', spec_key(idx), drop)
  digest_flush(digest_key(idx), left)
  swept = swept + #drop
  return res[1]
end

if #order > 0 then
  local g = redis.call('HMGET', gckey, 'idx', 'phase', 'cursor')
  local cur, phase, cursor = tonumber(g[1]), g[2] or 'sp', g[3] or '0'
  local pick
  for _, i in ipairs(order) do
    if cur and i == cur then pick = i break end
  end
  if not pick then
    phase, cursor = 'sp', '0'
    for _, i in ipairs(order) do
      if not cur or i > cur then pick = i break end
    end
    pick = pick or order[1]
  end
  local idx = tostring(pick)
  local ws = worker_state(idx)
  local done = false
  if phase == 'sp' then
    cursor = sweep(idx, spec_key(idx), cursor, ws)
    if cursor == '0' then
      if ws.synced_until > now then done = true else phase = 'r' end
    end
  else
    cursor = sweep(idx, reverse_key(idx), cursor, ws)
    done = cursor == '0'
  end
  if done then
    local nxt = order[1]
    for _, i in ipairs(order) do
      if i > pick then nxt = i break end
    end
    redis.call('HSET', gckey, 'idx', nxt, 'phase', 'sp', 'cursor', '0')
  else
    redis.call('HSET', gckey, 'idx', pick, 'phase', phase, 'cursor', cursor)
  end
end
local forgotten = 0
if redis.call('EXISTS', BASE .. ':seq') == 1 and redis.call('ZCARD', leases) == 0
    and redis.call('SCARD', BASE .. ':purge') == 0 and redis.call('HLEN', KEYS[1]) == 0 then
  local since = tonumber(redis.call('HGET', gckey, 'empty_since'))
  if not since then
    redis.call('HSET', gckey, 'empty_since', now)
  elseif now - since >= tonumber(ARGV[4]) then
    redis.call('DEL', KEYS[1], leases, BASE .. ':purge', BASE .. ':routers', view_key(),
      BASE .. ':seq', gckey)
    forgotten = 1
  end
else
  redis.call('HDEL', gckey, 'empty_since')
end
local out = { #expired, #dead_routers, swept, forgotten }
for _, idx in ipairs(stalled) do out[#out + 1] = idx end
return out
