-- drain.lua: mark a live worker draining (out of routing, still serving
-- what it has), or clear the mark.
-- A draining incarnation keeps its lease, entries and in-flight counts; its
-- record holds `drain_until` (unix ms, the drain deadline) and routing skips
-- it: view_refresh writes its view record's lease_until as -1 (route.lua),
-- and probe.lua leaves it out. Heartbeats keep the mark; a new incarnation
-- (after a deregistration or a lapsed lease) has none.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = ms from now to the drain
-- deadline (0 or more; a deadline already set stays when it is earlier), or
-- -1: clear the mark.
-- Returns {idx, ms left to the deadline}: {idx, -1} once cleared, {0, -1}
-- when the worker has no live lease.
-- Complexity: O(1).
local ms = tonumber(ARGV[3])
if not ms or ms ~= ms or ms < -1 or ms ~= math.floor(ms) then
  return redis.error_reply('ERR bad drain deadline: ' .. tostring(ARGV[3]))
end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return { 0, -1 } end
local key = worker_key(idx)
if ms < 0 then
  redis.call('HDEL', key, 'drain_until')
  view_refresh(idx)
  return { tonumber(idx), -1 }
end
local deadline = now + ms
local set = tonumber(redis.call('HGET', key, 'drain_until'))
if set and set < deadline then deadline = set end
redis.call('HSET', key, 'drain_until', deadline)
view_refresh(idx)
return { tonumber(idx), math.max(0, deadline - now) }
