-- load.lua: record the load a live worker reported in a response header
-- (ORCA), without touching its lease (only heartbeats renew leases).
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = num_requests_waiting or '',
-- ARGV[4] = kv_cache_usage_perc or '', ARGV[5] = num_requests_running or ''
-- ('' leaves a field as it was; counts are bounded to MAX_REPORTED, lib.lua)
-- Returns 1 when recorded, 0 when the worker has no live lease.
-- Complexity: O(1).
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return 0 end
local key = worker_key(idx)
if ARGV[3] ~= '' then redis.call('HSET', key, 'waiting', bounded_count(ARGV[3])) end
if ARGV[4] ~= '' then redis.call('HSET', key, 'kv_usage', ARGV[4]) end
if ARGV[5] and ARGV[5] ~= '' then redis.call('HSET', key, 'running', bounded_count(ARGV[5])) end
redis.call('HSET', key, 'load_ms', now)
view_refresh(idx)
return 1
