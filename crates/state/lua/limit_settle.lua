-- limit_settle.lua: the end of one admitted request of a tenant: its
-- tokens corrected by what the answer really used (the reservation made at
-- admission plus `delta`, which may be negative: a refund never makes the
-- TAT earlier than now), and its place in flight released.
-- KEYS[1] = <base>:ids (the library's contract; not touched)
-- ARGV[1] = base, ARGV[2] = router_id, ARGV[3] = tokens interval µs (0:
-- no tokens limit), ARGV[4] = token delta (signed), ARGV[5] = release (1:
-- the request held a place in flight on this router).
-- Returns the router's requests still held in flight for the tenant.
-- Complexity: O(1).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local router = ARGV[2]
local interval, delta = tonumber(ARGV[3]), tonumber(ARGV[4])
if not (interval and delta) then
  return redis.error_reply('ERR limit_settle: numeric arguments expected')
end
local tk_key, cc_key = BASE .. ':tk', BASE .. ':cc'
if interval > 0 and delta ~= 0 then
  local tat = tonumber(redis.call('GET', tk_key) or '0') or 0
  if delta > 0 and tat < now then tat = now end
  tat = tat + delta * interval
  if tat > now then
    redis.call('SET', tk_key, string.format('%d', tat), 'PX', math.floor((tat - now) / 1000) + 1)
  else
    redis.call('DEL', tk_key)
  end
end
local left = 0
if ARGV[5] == '1' then
  left = redis.call('HINCRBY', cc_key, router, -1)
  if left <= 0 then
    redis.call('HDEL', cc_key, router)
    left = 0
  end
end
return left
