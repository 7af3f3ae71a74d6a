-- workers.lua: read-only listing of every incarnation of a model, for admin
-- and inspect: live, expired (lease over, not yet collected) and draining
-- (a live incarnation marked by drain.lua, or one deregistered and queued
-- for purge).
-- KEYS[1] = <base>:ids
-- ARGV[1] = base
-- Returns per incarnation 14 values: idx, status (live|expired|draining),
-- then worker_info's 12 fields (see lib_view.lua).
-- Complexity: O(workers + routers).
local now = now_ms()
local view = fleet_view(live_routers(now))
local out = {}
local function emit(idx, status, lease)
  out[#out + 1] = idx
  out[#out + 1] = status
  for _, v in ipairs(worker_info(idx, lease, now, view)) do out[#out + 1] = v end
end
local z = redis.call('ZRANGE', BASE .. ':leases', 0, -1, 'WITHSCORES')
for i = 1, #z, 2 do
  local lease = tonumber(z[i + 1])
  local status = 'expired'
  if lease > now then
    status = redis.call('HGET', worker_key(z[i]), 'drain_until') and 'draining' or 'live'
  end
  emit(z[i], status, lease)
end
for _, idx in ipairs(redis.call('SMEMBERS', BASE .. ':purge')) do emit(idx, 'draining', nil) end
return out
