-- heartbeat.lua: register a worker or renew its lease, and record its load.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base "<ns>:{<model>}", ARGV[2] = worker_id, ARGV[3] = url,
-- ARGV[4] = lease_ms, ARGV[5] = has_load (0/1), ARGV[6] = num_requests_waiting,
-- ARGV[7] = num_requests_running, ARGV[8] = kv_cache_usage_perc (the counts
-- are bounded to MAX_REPORTED, lib_view.lua), ARGV[9] = role (prefill, decode or
-- both, checked by the caller; '' or absent: the record's role is left as
-- it is, and a new incarnation has none, which means both)
-- Returns {idx, lease_ms, is_new (1 when a new incarnation was created)}.
-- A worker whose lease already expired gets a new incarnation: its old
-- entries are stale and go to the purge queue. A live incarnation keeps the
-- url it registered with: a heartbeat with another url is refused ("worker
-- url conflict"), so one token holder cannot re-point another's worker.
-- Complexity: O(1).
local worker_id, url, lease_ms = ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local idx = live_idx(worker_id, now)
local is_new = 0
if idx then
  local bound = redis.call('HGET', worker_key(idx), 'url')
  if bound and bound ~= url then
    return redis.error_reply('ERR worker url conflict: ' .. worker_id .. ' is registered with another url until its lease lapses or it is drained')
  end
end
if not idx then
  local old = redis.call('HGET', KEYS[1], worker_id)
  if old then
    redis.call('ZREM', BASE .. ':leases', old)
    redis.call('SADD', BASE .. ':purge', old)
  end
  idx = tostring(redis.call('INCR', BASE .. ':seq'))
  redis.call('HSET', KEYS[1], worker_id, idx)
  redis.call('HSET', worker_key(idx), 'id', worker_id, 'registered_ms', now, 'synced_until', 0, 'syncing', 0)
  is_new = 1
end
redis.call('HSET', worker_key(idx), 'url', url, 'heartbeat_ms', now, 'lease_until', now + lease_ms)
if ARGV[9] and ARGV[9] ~= '' then redis.call('HSET', worker_key(idx), 'role', ARGV[9]) end
if ARGV[5] == '1' then
  redis.call('HSET', worker_key(idx), 'waiting', bounded_count(ARGV[6]), 'running', bounded_count(ARGV[7]),
    'kv_usage', ARGV[8], 'load_ms', now)
end
redis.call('ZADD', BASE .. ':leases', now + lease_ms, idx)
view_refresh(idx)
return { tonumber(idx), lease_ms, is_new }
