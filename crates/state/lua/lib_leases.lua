-- lib_leases.lua: bridging a gap in the store's writes, so that workers
-- whose heartbeats the store refused do not count as gone. Loaded after
-- lib_view.lua (it refreshes the view) into the same library
-- (crates/state/src/scripts.rs); `enter` (lib.lua) calls it before every function that
-- writes.
-- KEYS/ARGV: none of its own; every key comes from BASE, as in lib.lua.
--
-- A worker's lease measures time in which it could have renewed it. When
-- the store refuses writes (maxmemory with noeviction, a replica promoted
-- late, Valkey stopped and restarted from its data) no heartbeat can land,
-- and leases would lapse under workers that are alive: right after writes
-- come back, routing would find nobody (404 model_not_found) until each
-- worker's next heartbeat, which then starts a new incarnation and drops
-- its entries. So the time of the last write is kept (field `wrote_ms` of
-- <base>:gc), and the first write after a gap of more than WRITE_GAP_MS,
-- while a router's lease says it was renewing (routers renew every second
-- at most, so a gap means the store refused them too), moves every lease
-- that was live at the last write later by the gap. A worker that really
-- died during the gap keeps only what its lease had left at the last
-- write: it is still removed, that much later.
-- Complexity: O(1) per write; O(W log W) for W workers once per gap.

local WRITE_GAP_MS = 2000

bridge_write_gap = function()
  local leases = BASE .. ':leases'
  -- No worker: nothing to bridge, and nothing written for a model gc forgot.
  if redis.call('EXISTS', leases) == 0 then return end
  local gckey, now = BASE .. ':gc', now_ms()
  local last = tonumber(redis.call('HGET', gckey, 'wrote_ms'))
  if last and now - last > WRITE_GAP_MS
      and redis.call('ZCOUNT', BASE .. ':routers', string.format('(%d', last + WRITE_GAP_MS), '+inf') > 0 then
    local gap = now - last
    local live = redis.call('ZRANGEBYSCORE', leases, string.format('(%d', last), '+inf', 'WITHSCORES')
    for i = 1, #live, 2 do
      local idx, until_ms = live[i], tonumber(live[i + 1]) + gap
      redis.call('ZADD', leases, until_ms, idx)
      redis.call('HSET', worker_key(idx), 'lease_until', until_ms)
      view_refresh(idx)
    end
  end
  redis.call('HSET', gckey, 'wrote_ms', now)
end
