-- drains.lua: read-only listing of a model's draining workers, for routers
-- that move the answers still running on them at their drain deadline.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base
-- Returns per live, draining incarnation 3 values: worker id, url, ms left
-- to its drain deadline (0 once past).
-- Complexity: O(live workers).
local now = now_ms()
local out = {}
local z = live_leases(now)
for i = 1, #z, 2 do
  local f = redis.call('HMGET', worker_key(z[i]), 'id', 'url', 'drain_until')
  local deadline = tonumber(f[3])
  if deadline then
    out[#out + 1] = f[1] or ''
    out[#out + 1] = f[2] or ''
    out[#out + 1] = math.max(0, deadline - now)
  end
end
return out
