-- evict.lua: remove a batch of blocks the worker evicted, from both maps.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3..] = block hashes (16 hex digits).
-- Hashes the worker does not hold are ignored (reports may repeat).
-- Returns the number of entries removed, or the error "ERR unknown worker".
-- Complexity: O(n) for n hashes; callers send at most ~512 per call.
local bad = check_hashes(3)
if bad then return bad end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
local ws = worker_state(idx)
local removed = 0
for i = 3, #ARGV do
  local h = ARGV[i]
  if fwd_remove(h, idx) then removed = removed + 1 end
  reverse_remove(ws, h)
end
return removed
