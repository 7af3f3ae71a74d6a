-- stored.lua: the worker confirms that it now caches these blocks.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = confirmed ttl_ms,
-- ARGV[4..] = block hashes (16 lower-case hex digits).
-- Inserts missing entries and promotes speculative ones, with the confirmed
-- TTL; confirmed entries get their expiry refreshed.
-- Returns {inserted, promoted, refreshed}, or the error "ERR unknown worker".
-- Complexity: O(n) for n hashes; callers send at most ~512 per call.
local bad = check_hashes(4)
if bad then return bad end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
local ws = worker_state(idx)
local exp = expiry_s(now, tonumber(ARGV[3]))
local inserted, promoted, refreshed = 0, 0, 0
for i = 4, #ARGV do
  local h = ARGV[i]
  local list = fwd_get(h)
  local j, e = find_entry(list, idx)
  if not e then
    list[#list + 1] = { idx = idx, kind = 'c', exp = exp }
    inserted = inserted + 1
  else
    if e.kind == 's' then promoted = promoted + 1 else refreshed = refreshed + 1 end
    list[j] = { idx = idx, kind = 'c', exp = math.max(exp, e.exp) }
  end
  fwd_put(h, list)
  reverse_add(ws, h)
end
return { inserted, promoted, refreshed }
