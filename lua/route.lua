-- route.lua: the routing step in one atomic call: match the chain against
-- every live worker, choose one, claim its unheld blocks, count the request.
-- Routers that see the same new prefix at the same instant are serialised
-- here, so the second sees the first's claim and follows it.
-- The choice is the cache_aware policy of src/routing/cache_aware.rs (the
-- two are kept equal by tests/route_script.rs): among workers within the
-- bounded load ceil((1+eps) * (total load + 1) / workers) + slack, the least
-- estimated time to first token in tokens: uncached prompt tokens + load x
-- tokens_per_queued + KV pressure; else the least loaded. Ties by `seed`.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = router id, ARGV[3] = speculative ttl_ms,
-- ARGV[4] = prompt tokens, ARGV[5] = block size, ARGV[6] = epsilon,
-- ARGV[7] = tokens per queued request, ARGV[8] = kv pressure tokens,
-- ARGV[9] = kv pressure from, ARGV[10] = stale load ms, ARGV[11] = seed,
-- ARGV[12] = most blocks claimed in this call, ARGV[13] = router lease ms
-- (the caller's lease is extended, so its in-flight counts always count),
-- ARGV[14] = load slack (requests always allowed on top of the bound),
-- ARGV[15] = n hints, then n pairs (worker id, blocks it holds beyond the
-- hashes given here, from a read-only lookup of a longer chain), then the
-- chain: its block hashes packed into one string of 16-hex hashes.
-- Returns {blocks probed, chosen worker position (1-based, 0 if none),
-- leading blocks the chosen worker now holds (matched or claimed here),
-- then per worker 11 strings as lookup.lua, blocks given as -1}.
-- Matching probes blocks instead of scanning them (probe_chain in lib.lua):
-- one probe for a warm prompt, two for a cold one.
-- Complexity: O(workers x log blocks + claimed blocks); no O(prompt) step.
local nhints = tonumber(ARGV[15])
local first = 16 + 2 * nhints
local chain = ARGV[first]
if not chain or #chain % 16 ~= 0 or #ARGV ~= first then
  return redis.error_reply('ERR the chain must be one string of 16-hex hashes, last')
end
local now = now_ms()
local hints = {}
for i = 16, first - 1, 2 do hints[ARGV[i]] = tonumber(ARGV[i + 1]) end
local prompt, block_size = tonumber(ARGV[4]), tonumber(ARGV[5])
local eps, per_queued = tonumber(ARGV[6]), tonumber(ARGV[7])
local kv_tokens, kv_from = tonumber(ARGV[8]), tonumber(ARGV[9])
local stale_ms, seed = tonumber(ARGV[10]), tonumber(ARGV[11])
local head = #chain / 16

local live = live_leases(now)
local states, matched, probes = probe_chain(live, chain, now)
if not states then
  return redis.error_reply('ERR bad block hash at chain position ' .. matched)
end
local routers = live_routers(now)
routers[ARGV[2]] = true -- its lease is extended below
local n = #live / 2
local infos, loads, total = {}, {}, 0
for i = 1, n do
  local info = worker_info(live[2 * i - 1], tonumber(live[2 * i]), now, routers, states[i].rec, false)
  infos[i] = info
  local age = tonumber(info[7])
  local fresh = age >= 0 and age <= stale_ms
  loads[i] = math.max(tonumber(info[3]), fresh and tonumber(info[4]) or 0)
  total = total + loads[i]
end
local cap = math.ceil((1 + eps) * (total + 1) / math.max(n, 1)) + tonumber(ARGV[14])
local best, best_key = 0, nil
for i = 1, n do
  local info = infos[i]
  local blocks = matched[i]
  if blocks == head and hints[info[1]] then blocks = blocks + hints[info[1]] end
  local fresh = tonumber(info[7]) >= 0 and tonumber(info[7]) <= stale_ms
  local kv = fresh and tonumber(info[6]) or 0
  local key
  if loads[i] < cap then
    local pressure = 0
    if kv > kv_from then pressure = (kv - kv_from) / math.max(1 - kv_from, 1e-9) * kv_tokens end
    key = { 0, math.max(prompt - blocks * block_size, 0) + loads[i] * per_queued + pressure }
  else
    key = { 1, loads[i] }
  end
  key[3] = (seed + i * 7919) % 1000003
  if not best_key or key[1] < best_key[1] or (key[1] == best_key[1] and (key[2] < best_key[2]
      or (key[2] == best_key[2] and key[3] < best_key[3]))) then
    best, best_key = i, key
  end
end
local covered = 0
if best > 0 then
  local ws = states[best]
  local from = matched[best] + 1
  local to = math.min(head, from + tonumber(ARGV[12]) - 1)
  local claim = {}
  for pos = from, to do
    local h = packed_hash(chain, pos)
    if not valid_hash(h) then return redis.error_reply('ERR bad block hash at chain position ' .. pos) end
    claim[#claim + 1] = h
  end
  if #claim > 0 then claim_blocks(ws, claim, expiry_s(now, tonumber(ARGV[3])), now) end
  redis.call('HINCRBY', worker_key(ws.idx), inflight_field(ARGV[2]), 1)
  covered = to
end
redis.call('ZADD', BASE .. ':routers', 'GT', now + tonumber(ARGV[13]), ARGV[2])
local out = { tostring(probes), tostring(best), tostring(covered) }
for i = 1, n do
  out[#out + 1] = tostring(matched[i])
  for _, v in ipairs(infos[i]) do out[#out + 1] = v end
end
return out
