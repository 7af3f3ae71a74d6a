-- sync_stage.lua: add one chunk of a worker's full snapshot to a staging set.
-- Nothing visible changes until sync_commit.lua swaps the staged set in.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = sync_id ([A-Za-z0-9_-]{1,64}),
-- ARGV[4] = staging ttl_ms (an abandoned sync disappears by itself),
-- ARGV[5] = most hashes a snapshot may have; ARGV[6] = the hashes' tiers,
-- one entry kind each ('c' GPU, 'h' CPU, 'd' disk), or '' when all are on
-- the GPU; ARGV[7..] = block hashes (16 hex digits).
-- The staged hashes' digests accumulate in stage_dg:<idx>:<sync_id> (as
-- dg:<idx>, tiers included; see lib_sync.lua), and the tiers of those not on the
-- GPU in stage_t:<idx>:<sync_id> (hash -> 'h' or 'd'); the commit installs
-- both. A hash listed twice keeps its first tier.
-- Returns the number of hashes staged so far, "ERR unknown worker", or
-- "ERR sync too large" (the sync is then aborted: what was staged is
-- dropped whole, and its later chunks and its commit are refused with
-- "ERR sync aborted", see stage_abort in lib_sync.lua); 0, staging nothing, for a
-- sync_id the worker already committed (a retried chunk).
-- Complexity: O(n) for n hashes; callers send at most 512 per call.
local bad = check_hashes(7)
if bad then return bad end
local tiers = ARGV[6]
if tiers ~= '' and (#tiers ~= #ARGV - 6 or sfind(tiers, '[^chd]')) then
  return redis.error_reply("ERR the tiers must be one of 'c', 'h', 'd' per hash, or empty")
end
if not string.match(ARGV[3], '^[%w_%-]+$') or #ARGV[3] > 64 then
  return redis.error_reply('ERR bad sync_id')
end
local idx = live_idx(ARGV[2], now_ms())
if not idx then return redis.error_reply('ERR unknown worker') end
-- A chunk of a sync already committed (a retry after a lost reply) must
-- not start a new stage that a retried commit would then apply.
if redis.call('HGET', worker_key(idx), 'last_sync') == ARGV[3] then return 0 end
local stage, stage_dg, stage_t = stage_keys(idx, ARGV[3])
if stage_aborted(stage) then return redis.error_reply('ERR sync aborted') end
local acc, lower = {}, {}
for i = 7, #ARGV, 512 do
  local chunk = { unpack(ARGV, i, math.min(i + 511, #ARGV)) }
  local present = redis.call('SMISMEMBER', stage, unpack(chunk))
  local fresh, seen = {}, {}
  for j, h in ipairs(chunk) do
    if present[j] == 0 and not seen[h] then
      seen[h] = true
      fresh[#fresh + 1] = h
      local kind = tiers == '' and 'c' or ssub(tiers, i + j - 7, i + j - 7)
      digest_toggle(acc, h, kind)
      if kind ~= 'c' then
        lower[#lower + 1] = h
        lower[#lower + 1] = kind
      end
    end
  end
  set_call('SADD', stage, fresh)
end
local staged = redis.call('SCARD', stage)
if staged > tonumber(ARGV[5]) then
  stage_abort(idx, ARGV[3], tonumber(ARGV[4]))
  return redis.error_reply('ERR sync too large')
end
digest_flush(stage_dg, acc)
set_call('HSET', stage_t, lower)
redis.call('PEXPIRE', stage, tonumber(ARGV[4]))
redis.call('PEXPIRE', stage_dg, tonumber(ARGV[4]))
redis.call('PEXPIRE', stage_t, tonumber(ARGV[4]))
return staged
