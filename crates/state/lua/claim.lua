-- claim.lua: speculative insert when a request is routed to a worker.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = speculative ttl_ms,
-- ARGV[4] = router id whose in-flight count for the worker goes up by one,
-- or '' for none; ARGV[5] = the request's uncached prompt tokens, added to
-- that router's prefill count for the worker (0 for none); ARGV[6..] =
-- block hashes (16 lower-case hex digits).
-- Inserts, with the speculative TTL, each block the worker does not already
-- hold on any tier (a live entry of any kind is left as it is: a block on
-- the CPU tier is loaded by the request, not computed). Routing a request is
-- one call: its blocks are claimed and it is counted in flight atomically.
-- Returns the number of blocks inserted, or the error "ERR unknown worker".
-- Complexity: O(n) for n hashes; one forward read and write per inserted
-- block, set updates batched. Callers send at most 64 hashes per call.
local bad = check_hashes(6)
if bad then return bad end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
local ws = worker_state(idx)
local exp = expiry_s(now, tonumber(ARGV[3]))
local inserted = claim_blocks(ws, { unpack(ARGV, 6) }, exp, now)
if ARGV[4] ~= '' then
  redis.call('HINCRBY', view_key(), inflight_field(idx, ARGV[4]), 1)
  local tokens = tonumber(ARGV[5]) or 0
  if tokens > 0 then redis.call('HINCRBY', view_key(), prefill_field(idx, ARGV[4]), tokens) end
end
return inserted
