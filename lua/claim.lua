-- claim.lua: speculative insert when a request is routed to a worker.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = speculative ttl_ms,
-- ARGV[4..] = block hashes (16 lower-case hex digits), in chain order.
-- Inserts, with the speculative TTL, each block the worker does not already
-- hold (a live entry of either kind is left as it is).
-- Returns the number of blocks inserted, or the error "ERR unknown worker".
-- Complexity: O(n) for n hashes; callers send at most ~512 per call.
local bad = check_hashes(4)
if bad then return bad end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
local ws = worker_state(idx)
local exp = expiry_s(now, tonumber(ARGV[3]))
local inserted = 0
for i = 4, #ARGV do
  local h = ARGV[i]
  local list = fwd_get(h)
  if not holds(list, ws, h, now) then
    local j = find_entry(list, idx)
    if j then table.remove(list, j) end
    list[#list + 1] = { idx = idx, kind = 's', exp = exp }
    fwd_put(h, list)
    reverse_add(ws, h)
    inserted = inserted + 1
  end
end
return inserted
