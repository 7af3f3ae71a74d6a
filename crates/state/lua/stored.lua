-- stored.lua: the worker confirms that it now caches these blocks.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = confirmed ttl_ms,
-- ARGV[4..] = block hashes (16 lower-case hex digits).
-- Inserts missing entries and promotes speculative ones, with the confirmed
-- TTL; confirmed entries get their expiry refreshed.
-- Hashes that join the confirmed membership are XORed into its digests
-- (dg:<idx>; during a sync, those not yet in the target s:<idx>).
-- Returns {inserted, promoted, refreshed}, or the error "ERR unknown worker".
-- Complexity: O(n) for n hashes; one forward read and write per hash (one
-- bucket key, one entry search), set and digest updates batched. Callers
-- send at most 64 hashes per call.
local bad = check_hashes(4)
if bad then return bad end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
local ws = worker_state(idx)
local exp = expiry_s(now, tonumber(ARGV[3]))
local inserted, promoted, refreshed = 0, 0, 0
local hashes = { unpack(ARGV, 4) }
local in_target = ws.syncing and set_call('SMISMEMBER', sync_target_key(idx), hashes)
local joined = {}
-- The new entry, formatted once: an older expiry is the rule.
local token = idx .. 'c' .. string.format('%d', exp)
for i, h in ipairs(hashes) do
  local key = bucket_key(h)
  local v = redis.call('HGET', key, h) or nil
  local kind, old, s, e = entry_of(v, idx)
  if not kind then
    inserted = inserted + 1
  elseif kind == 's' then
    promoted = promoted + 1
  else
    refreshed = refreshed + 1
  end
  if in_target then
    if in_target[i] == 0 then digest_toggle(joined, h) end
  elseif kind ~= 'c' then
    digest_toggle(joined, h)
  end
  local entry = token
  if old and old > exp then entry = idx .. 'c' .. string.format('%d', old) end
  redis.call('HSET', key, h, splice(v, s, e, entry))
end
set_call('SADD', reverse_key(idx), hashes)
set_call('SREM', spec_key(idx), hashes)
if ws.syncing then set_call('SADD', sync_target_key(idx), hashes) end
digest_flush(digest_key(idx), joined)
return { inserted, promoted, refreshed }
