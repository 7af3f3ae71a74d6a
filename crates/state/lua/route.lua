-- route.lua: the routing step in one atomic call: match the chain against
-- every live worker, choose one, claim its unheld blocks, count the request.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = router id, ARGV[3] = speculative ttl_ms,
-- ARGV[4] = prompt tokens, ARGV[5] = block size, ARGV[6] = epsilon,
-- ARGV[7] = tokens per queued request, ARGV[8] = kv pressure tokens,
-- ARGV[9] = kv pressure from, ARGV[10] = stale load ms, ARGV[11] = seed,
-- ARGV[12] = most blocks claimed in this call,
-- ARGV[13] = load slack (requests always allowed on top of the bound),
-- ARGV[14] = index stride S, ARGV[15] = blocks in the prompt's head (n),
-- ARGV[16] = the engines' max_num_seqs, ARGV[17] = tokens per request in
-- the batch, ARGV[18] = weight of the request's own uncached tokens,
-- ARGV[19] = weight of a token cached on the CPU tier, ARGV[20] = weight of
-- a token cached on disk (a GPU token weighs 1),
-- ARGV[21] = n hints, then n pairs (worker id, blocks it holds beyond the
-- head, from a read-only lookup of a longer chain), then m, then m worker
-- ids: the only workers that may be chosen (a gateway's endpoint subset;
-- m = 0: any), then the chain: the
-- head's indexed blocks (the anchors ending 1, 2, 4, ..., S, 2S, 3S, ...
-- blocks, and block n; see protocol::index) packed into one string, 8
-- big-endian bytes each, then the head's first blocks, every one (at most
-- protocol::index::GAP_PROBE_BLOCKS), packed the same way: probe_gaps
-- looks there for tips and branch points between indexed blocks.
-- Returns {indexed blocks probed, chosen worker position (1-based, 0 if
-- none), leading blocks the chosen worker now holds (matched or claimed
-- here), the server time (ms), prefill tokens counted for the chosen
-- worker, then per live worker: matched blocks, of them those held on the
-- GPU, those held on the CPU or the GPU, requests in flight (over live
-- routers), their prefill tokens, its routing-view record as stored
-- (binary: see VIEW_FIELDS in lib_view.lua)}. Matched blocks end at an indexed
-- block: holding the first k of them means holding covered(k, n, S)
-- blocks (lib_routing.lua), or more where probe_gaps found a deeper tip or
-- branch point; so do the GPU and CPU depths (probe_tiers: one bisection
-- more per tier boundary, none when the deepest block is on the GPU).
-- Reads the fleet with one HGETALL of the routing view (leases, routers,
-- records, in-flight counts) and matches by probing blocks instead of
-- scanning them (probe_chain in lib_routing.lua): one probe for a warm
-- prompt, two for a cold one, three for a seen prompt with a new last block,
-- then at most S - 1 for the deepest match that ends before the tip.
-- Complexity: O(workers x log indexed blocks + S + claimed blocks), plus
-- creating the arguments: the indexed blocks and at most
-- GAP_PROBE_BLOCKS first blocks.
--
-- Routers that see the same new prefix at the same instant are serialised
-- here, so the second sees the first's claim (and its queued prefill).
-- The choice is the cache_aware policy of src/routing/cache_aware.rs (the
-- two are kept equal by tests/route_script.rs): among workers within the
-- bounded load ceil((1+eps) * (total load + 1) / workers) + slack, the least
-- estimated time to first token in tokens: uncached prompt tokens (x their
-- weight: a prefill delays later requests too; a cached token counts as
-- its tier's weight of a token: GPU 1, CPU ARGV[19], disk ARGV[20], the
-- rest of a CPU hit being the load back to the GPU) + the prefill tokens routed
-- to it and not yet past their first token + its batch x tokens_per_running
-- + queued requests x tokens_per_queued + KV pressure (a prefix at least
-- half the workers hold, two at least, counts as cached on all: the
-- hotspot guard, over the tier-weighted cached tokens; at equal cost the
-- deeper real match first); else the
-- least loaded. Batch: the requests there (in flight, or running + waiting
-- as reported, whichever is more) up to max_num_seqs; queued: those beyond
-- it, or the reported waiting if more. Ties by `seed`
-- (tie_break in lib_routing.lua: each worker equally likely among the tied).
-- The chosen worker's uncached tokens (those it holds on no tier) are added
-- to this router's prefill count for it (p<idx>:<router>); the router takes
-- them off at the response's first byte. Claims cover only blocks it holds
-- on no tier: a CPU copy is loaded, not computed.
local nhints = tonumber(ARGV[21])
local at = 22 + 2 * nhints
local nallowed = tonumber(ARGV[at])
if not nallowed then return redis.error_reply('ERR the allowed workers must be counted after the hints') end
local allowed = nil
if nallowed > 0 then
  allowed = {}
  for i = at + 1, at + nallowed do allowed[ARGV[i]] = true end
end
local first = at + 1 + nallowed
local chain, full = ARGV[first], ARGV[first + 1]
if not chain or #chain % 8 ~= 0 or not full or #full % 8 ~= 0 or #ARGV ~= first + 1 then
  return redis.error_reply('ERR the chain and its first blocks must be strings of 8-byte hashes, last')
end
local now = now_ms()
local prompt, block_size = tonumber(ARGV[4]), tonumber(ARGV[5])
local eps, per_queued = tonumber(ARGV[6]), tonumber(ARGV[7])
local kv_tokens, kv_from = tonumber(ARGV[8]), tonumber(ARGV[9])
local stale_ms, seed = tonumber(ARGV[10]), tonumber(ARGV[11])
local stride, head = tonumber(ARGV[14]), tonumber(ARGV[15])
local max_seqs, per_running, per_uncached = tonumber(ARGV[16]), tonumber(ARGV[17]), tonumber(ARGV[18])
local w_cpu, w_disk = tonumber(ARGV[19]), tonumber(ARGV[20])

local view = routing_view(now, ARGV[2])
local list = view.list
local p = probe_chain(view.at, view.syncing, chain, now)
probe_tiers(p, list)
-- From here on w.matched (w.gpu, w.cpu) counts blocks; w.indexed keeps the
-- indexed ones.
for _, w in ipairs(list) do
  local k = w.matched
  w.indexed = k
  w.matched = covered(k, head, stride)
  -- A tier that reaches the match covers as much (the common case).
  w.gpu = w.gpu == k and w.matched or covered(w.gpu, head, stride)
  w.cpu = w.cpu == k and w.matched or covered(w.cpu, head, stride)
end
probe_gaps(p, list, full, #chain / 8, head, stride)
-- Per worker: its load (in flight, or the queue it reported if fresher and
-- longer) and the blocks it is credited with: its own match (plus hints
-- beyond the head, at the tier of its last head block), weighted by tier
-- (effective_tokens() in cache_aware.rs), or what at least half the
-- workers hold (two at least), if more: the hotspot guard of
-- shared_tokens() in cache_aware.rs.
local hints = nhints > 0 and {} or nil
for i = 22, at - 1, 2 do hints[ARGV[i]] = tonumber(ARGV[i + 1]) end
-- Workers outside the allowed set take no part in the choice: not in the
-- load bound, the shared depth or the ranking (w.out, reset every call:
-- the list is the view's cached parse).
local n, total, depths = 0, 0, {}
for _, w in ipairs(list) do
  local id = (hints or allowed) and string.match(w.raw, '^([^\n]*)\n', VIEW_BYTES + 1)
  w.out = allowed ~= nil and not allowed[id]
  if not w.out then
    n = n + 1
    local age = w.load_ms >= 0 and now - w.load_ms or -1
    local fresh = age >= 0 and age <= stale_ms
    local load = w.inflight
    if fresh and w.waiting > load then load = w.waiting end
    w.pressure_kv = fresh and w.kv or 0
    w.load, total = load, total + load
    -- The batch, and the requests waiting for a place in it
    -- (batch_requests() and queued_requests() in cache_aware.rs).
    local occupancy = w.inflight
    if fresh and w.waiting + w.running > occupancy then occupancy = w.waiting + w.running end
    local queued = occupancy - max_seqs
    if fresh and w.waiting > queued then queued = w.waiting end
    w.queued = math.max(queued, 0)
    w.batch = math.min(occupancy, max_seqs)
    local credited = w.matched
    if credited == head and hints then
      local more = hints[id] or 0
      credited = credited + more
      if w.cpu == head then w.cpu = w.cpu + more end
      if w.gpu == head then w.gpu = w.gpu + more end
    end
    w.credited = credited
    -- In tokens, in the order effective_tokens() sums them.
    local effective = w.gpu * block_size + (w.cpu - w.gpu) * block_size * w_cpu
      + (credited - w.cpu) * block_size * w_disk
    w.effective = effective
    if effective > 0 then depths[#depths + 1] = effective end
  end
end
local cap = math.ceil((1 + eps) * (total + 1) / math.max(n, 1)) + tonumber(ARGV[13])
local shared, half = 0, math.max(2, math.ceil(n / 2))
if n >= 2 and #depths >= half then
  table.sort(depths, function(a, b) return a > b end)
  shared = depths[half]
end
-- The least key (over bound?, cost, blocks it really holds, most first,
-- tie-break), compared in order. The third key keeps a hot prefix on its
-- holders while they cost no more than the rest: the guard spreads it only
-- when their load makes them dearer.
local best, b1, b2, bh, b3 = 0, 0, 0, 0, 0
for i, w in ipairs(list) do
  if not w.out then -- a worker outside the allowed set is never chosen
    local cached = math.max(w.effective, shared)
    local k1, k2, kh
    if w.load < cap then
      local pressure = 0
      local kv = w.pressure_kv
      if kv > kv_from then pressure = (kv - kv_from) / math.max(1 - kv_from, 1e-9) * kv_tokens end
      k1, k2, kh = 0, math.max(prompt - cached, 0) * per_uncached + w.prefill + w.batch * per_running
        + w.queued * per_queued + pressure, -w.effective
    else
      k1, k2, kh = 1, w.load, 0
    end
    if best == 0 or k1 < b1 or (k1 == b1 and (k2 < b2 or (k2 == b2 and kh < bh))) then
      best, b1, b2, bh, b3 = i, k1, k2, kh, nil
    elseif k1 == b1 and k2 == b2 and kh == bh then
      b3 = b3 or tie_break(seed, best)
      local k3 = tie_break(seed, i)
      if k3 < b3 then best, b3 = i, k3 end
    end
  end
end
local reach, prefill = 0, 0
if best > 0 then
  local w = list[best]
  local to = math.min(#chain / 8, w.indexed + tonumber(ARGV[12]))
  local claim = {}
  for pos = w.indexed + 1, to do claim[#claim + 1] = packed_hash(chain, pos) end
  if #claim > 0 then claim_blocks(w, claim, expiry_s(now, tonumber(ARGV[3])), now, p.values) end
  redis.call('HINCRBY', view_key(), inflight_field(w.idx, ARGV[2]), 1)
  -- What it will prefill: the prompt beyond its real match on any tier (the
  -- hotspot guard's credit is not a cache; a CPU hit is loaded, not computed).
  prefill = math.max(prompt - w.credited * block_size, 0)
  if prefill > 0 then redis.call('HINCRBY', view_key(), prefill_field(w.idx, ARGV[2]), prefill) end
  reach = covered(to, head, stride)
end
local out = view.out -- reused: its length is fixed while the view is
out[1], out[2], out[3], out[4], out[5] = p.probes, best, reach, now, prefill
for i, w in ipairs(list) do
  local j = 5 + 6 * i
  out[j - 5], out[j - 4], out[j - 3] = w.matched, w.gpu, w.cpu
  out[j - 2], out[j - 1], out[j] = w.inflight, w.prefill, w.raw
end
return out
