-- report_load.lua: record the load live workers reported in a response header
-- (ORCA) or a scrape, without touching their leases (only heartbeats renew
-- leases).
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, then groups of four: worker_id, num_requests_waiting or
-- '', kv_cache_usage_perc or '', num_requests_running or '' ('' leaves a
-- field as it was; counts are bounded to MAX_REPORTED, lib_view.lua). A sharded
-- model's parts get one call with every worker's latest report.
-- Returns 1 when the first worker's load was recorded, 0 when it has no
-- live lease (workers without one are skipped).
-- Complexity: O(groups).
local now = now_ms()
local first = nil
for i = 2, #ARGV, 4 do
  local idx = live_idx(ARGV[i], now)
  if idx then
    local key = worker_key(idx)
    local waiting, kv, running = ARGV[i + 1] or '', ARGV[i + 2] or '', ARGV[i + 3] or ''
    if waiting ~= '' then redis.call('HSET', key, 'waiting', bounded_count(waiting)) end
    if kv ~= '' then redis.call('HSET', key, 'kv_usage', kv) end
    if running ~= '' then redis.call('HSET', key, 'running', bounded_count(running)) end
    redis.call('HSET', key, 'load_ms', now)
    view_refresh(idx)
  end
  first = first or (idx and 1 or 0)
end
return first or 0
