-- route.lua: the routing step in one atomic call: match the chain against
-- every live worker, choose one, claim its unheld blocks, count the request.
-- Routers that see the same new prefix at the same instant are serialised
-- here, so the second sees the first's claim and follows it.
-- The choice is the cache_aware policy of src/routing/cache_aware.rs (the
-- two are kept equal by tests/route_script.rs): among workers within the
-- bounded load ceil((1+eps) * (total load + 1) / workers) + slack, the least
-- estimated time to first token in tokens: uncached prompt tokens + load x
-- tokens_per_queued + KV pressure (a prefix most workers hold counts as
-- cached on all: the hotspot guard); else the least loaded. Ties by `seed`
-- (tie_break in lib.lua: each worker equally likely among the tied).
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = router id, ARGV[3] = speculative ttl_ms,
-- ARGV[4] = prompt tokens, ARGV[5] = block size, ARGV[6] = epsilon,
-- ARGV[7] = tokens per queued request, ARGV[8] = kv pressure tokens,
-- ARGV[9] = kv pressure from, ARGV[10] = stale load ms, ARGV[11] = seed,
-- ARGV[12] = most blocks claimed in this call,
-- ARGV[13] = load slack (requests always allowed on top of the bound),
-- ARGV[14] = n hints, then n pairs (worker id, blocks it holds beyond the
-- hashes given here, from a read-only lookup of a longer chain), then the
-- chain: its block hashes packed into one string of 16-hex hashes.
-- Returns {blocks probed, chosen worker position (1-based, 0 if none),
-- leading blocks the chosen worker now holds (matched or claimed here),
-- then per worker 11 values as lookup.lua, blocks given as -1}.
-- Matching probes blocks instead of scanning them (probe_chain in lib.lua):
-- one probe for a warm prompt, two for a cold one.
-- Complexity: O(workers x log blocks + claimed blocks); no O(prompt) step.
local nhints = tonumber(ARGV[14])
local first = 15 + 2 * nhints
local chain = ARGV[first]
if not chain or #chain % 16 ~= 0 or #ARGV ~= first then
  return redis.error_reply('ERR the chain must be one string of 16-hex hashes, last')
end
local now = now_ms()
local hints = {}
for i = 15, first - 1, 2 do hints[ARGV[i]] = tonumber(ARGV[i + 1]) end
local prompt, block_size = tonumber(ARGV[4]), tonumber(ARGV[5])
local eps, per_queued = tonumber(ARGV[6]), tonumber(ARGV[7])
local kv_tokens, kv_from = tonumber(ARGV[8]), tonumber(ARGV[9])
local stale_ms, seed = tonumber(ARGV[10]), tonumber(ARGV[11])
local head = #chain / 16

local live = live_leases(now)
local routers = live_routers(now)
routers[ARGV[2]] = true -- this call counts its own in-flight requests
local view = fleet_view(routers)
local states, matched, probes = probe_chain(live, chain, now, view)
if not states then
  return redis.error_reply('ERR bad block hash at chain position ' .. matched)
end
local n = #live / 2
local infos, loads, kvs, total = {}, {}, {}, 0
for i = 1, n do
  local info = worker_info(live[2 * i - 1], tonumber(live[2 * i]), now, view, false)
  infos[i] = info
  local age = tonumber(info[7])
  local fresh = age >= 0 and age <= stale_ms
  loads[i] = math.max(tonumber(info[3]), fresh and tonumber(info[4]) or 0)
  kvs[i] = fresh and tonumber(info[6]) or 0
  total = total + loads[i]
end
local cap = math.ceil((1 + eps) * (total + 1) / math.max(n, 1)) + tonumber(ARGV[13])
-- Blocks each worker is credited with: its own match (plus hints beyond
-- the head), or the depth a strict majority holds (at least two workers),
-- if deeper: the hotspot guard of shared_tokens() in cache_aware.rs.
local credited = {}
for i = 1, n do
  credited[i] = matched[i]
  if credited[i] == head then credited[i] = credited[i] + (hints[infos[i][1]] or 0) end
end
local shared = 0
if n >= 2 then
  local sorted = {}
  for i = 1, n do sorted[i] = credited[i] end
  table.sort(sorted, function(a, b) return a > b end)
  shared = sorted[math.floor(n / 2) + 1]
end
-- The least key (over bound?, cost, tie-break), compared in order.
local best, b1, b2, b3 = 0, 0, 0, 0
for i = 1, n do
  local blocks = math.max(credited[i], shared)
  local k1, k2
  if loads[i] < cap then
    local pressure, kv = 0, kvs[i]
    if kv > kv_from then pressure = (kv - kv_from) / math.max(1 - kv_from, 1e-9) * kv_tokens end
    k1, k2 = 0, math.max(prompt - blocks * block_size, 0) + loads[i] * per_queued + pressure
  else
    k1, k2 = 1, loads[i]
  end
  local k3 = tie_break(seed, i)
  if best == 0 or k1 < b1 or (k1 == b1 and (k2 < b2 or (k2 == b2 and k3 < b3))) then
    best, b1, b2, b3 = i, k1, k2, k3
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
  redis.call('HINCRBY', view_key(), inflight_field(ws.idx, ARGV[2]), 1)
  covered = to
end
local out = { probes, best, covered }
for i = 1, n do
  out[#out + 1] = matched[i]
  for _, v in ipairs(infos[i]) do out[#out + 1] = v end
end
return out
