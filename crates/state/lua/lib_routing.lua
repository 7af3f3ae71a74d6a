-- lib_routing.lua: what route.lua needs beyond lib.lua, loaded last
-- (after lib_leases.lua) into the same library: the routing view as routing reads it
-- (parsed once, reused across calls), probing a chain by holders,
-- tie-breaking.
-- KEYS/ARGV: none of its own. Its helpers run inside a script's call, after
-- lib.lua's `enter` has checked KEYS[1] = "<base>:ids" and set BASE from
-- ARGV[1]; every key they touch is built from BASE (one cluster slot). The
-- rest comes in as parameters.

-- A pseudo-random key for worker position i under a per-request seed, so
-- that among tied workers each is equally likely to come first. Two
-- squarings modulo a prime below 2^26 mix seed and position (x * x stays
-- below 2^53, exact in Lua's doubles); a linear key (seed + i * c) would
-- favour the first positions.
local TIE_PRIME = 67108859
local function tie_break(seed, i)
  local x = (seed + i * 40503) % TIE_PRIME
  x = (x * x + 12345) % TIE_PRIME
  return (x * x + i) % TIE_PRIME
end

-- Leading blocks known held when the first k indexed blocks of an n-block
-- chain are (protocol::index::blocks_covered): the anchors end 1, 2, 4, 8,
-- ..., stride blocks, then every `stride` more; the tip ends the chain.
local function covered(k, n, stride)
  local head, x = 1, 1
  while x < stride do x, head = x * 2, head + 1 end
  local c
  if k == 0 then
    c = 0
  elseif k <= head then
    c = 2 ^ (k - 1)
  else
    c = stride * (k - head + 1)
  end
  return math.min(c, n)
end

-- The i-th hash (1-based), as 16 hex digits, of a chain packed as one string
-- of 8-byte big-endian hashes. Binary halves the argument: Valkey's Lua
-- hashes every byte of every string it creates (about 1.6 ns a byte here),
-- and the chain is most of what a routing call sends.
-- Also returns the hash's forward-map bucket key: bucket_key's rule (lib.lua)
-- applied to the bytes, without cutting the hex string apart again.
local function packed_hash(chain, i)
  local a, b, c, d, e, f, g, h = sbyte(chain, 8 * i - 7, 8 * i)
  local hash = HEX[a] .. HEX[b] .. HEX[c] .. HEX[d] .. HEX[e] .. HEX[f] .. HEX[g] .. HEX[h]
  return hash, BASE .. ':f:' .. HEX[a] .. HEX[b - b % 8]
end

-- Parsed routing views per model base, reused across calls (library
-- locals outlive a call): { list, at, syncing, out }. Reused while every
-- live record is the same string as when parsed (Lua interns strings: the
-- comparison is a pointer's) and its lease lasts; a heartbeat or a load
-- report rewrites a record and the next call parses afresh. What a call
-- allocates matters: Lua's collector works in proportion to it.
local VIEW_CACHE, VIEW_CACHE_SIZE = {}, 0

-- A fresh parse of the view's live records (see routing_view).
local function parse_view(flat, now)
  local list, at, syncing = {}, {}, {}
  for i = 1, #flat, 2 do
    local k, v = flat[i], flat[i + 1]
    if sbyte(k) ~= 114 and not sfind(k, ':', 2, true) and #v >= VIEW_BYTES then
      local lease, synced, sync, waiting, running, kv, load_ms = struct.unpack(VIEW_PACK, v)
      if lease > now then
        if waiting < 0 then waiting = 0 end
        if running < 0 then running = 0 end
        if kv < 0 then kv = 0 end
        local w = {
          idx = k, raw = v, lease = lease, synced_until = synced, syncing = sync == 1, waiting = waiting,
          running = running, kv = kv, load_ms = load_ms, inflight = 0, prefill = 0, matched = 0,
          hit = false, level = 0, deepest = 0, deep_level = 0, gpu = 0, cpu = 0, load = 0, credited = 0,
          effective = 0, pressure_kv = 0, indexed = 0,
        }
        list[#list + 1], at[k] = w, w
        if w.syncing then syncing[#syncing + 1] = w end
      end
    end
  end
  return { list = list, at = at, syncing = syncing, out = {} }
end

-- The live fleet as routing sees it, from one HGETALL of the view: a list
-- of worker tables (view order), each { idx, raw (the record as stored: the
-- reply carries it unparsed), lease, synced_until, syncing (as
-- worker_state, so it serves as one), waiting, running, kv, load_ms (-1 if
-- never reported) } plus this call's scratch, reset here: inflight and
-- prefill (the requests and their prompt tokens before a first token,
-- summed over live routers and `router`, the caller), matched, hit, load,
-- credited, pressure_kv. Also at[idx] = the worker's table, syncing = the workers
-- applying a sync, and out, a reply table to reuse. One pass over the view
-- checks the cached parse (every cached record unchanged and leased, no
-- other live record), collects live routers and in-flight fields.
local function routing_view(now, router)
  local flat = redis.call('HGETALL', view_key())
  local c = VIEW_CACHE[BASE]
  local valid, seen = c ~= nil, 0
  local routers, counts = { [router] = true }, nil
  for i = 1, #flat, 2 do
    local k = flat[i]
    if sbyte(k) == 114 then -- 'r': router:<id>
      if (tonumber(flat[i + 1]) or 0) > now then routers[ssub(k, 8)] = true end
    elseif sfind(k, ':', 2, true) then
      counts = counts or {}
      counts[#counts + 1] = i
    elseif valid then
      local w, v = c.at[k], flat[i + 1]
      if w then
        valid = w.raw == v and w.lease > now
        seen = seen + 1
      elseif #v >= VIEW_BYTES and struct.unpack('<d', v) > now then
        valid = false -- a live record the cache has not parsed
      end
    end
  end
  if not (valid and seen == #c.list) then
    if not c then
      VIEW_CACHE_SIZE = VIEW_CACHE_SIZE + 1
      if VIEW_CACHE_SIZE > 64 then VIEW_CACHE, VIEW_CACHE_SIZE = {}, 1 end
    end
    c = parse_view(flat, now)
    VIEW_CACHE[BASE] = c
  end
  for _, w in ipairs(c.list) do
    w.inflight, w.prefill, w.matched, w.hit, w.deepest, w.gpu, w.cpu = 0, 0, 0, false, 0, 0, 0
  end
  for _, i in ipairs(counts or {}) do
    local k = flat[i]
    local colon = sfind(k, ':', 2, true)
    local tokens = sbyte(k) == 112 -- 'p': p<idx>:<router>, prefill tokens
    local w = c.at[ssub(k, tokens and 2 or 1, colon - 1)]
    local n = tonumber(flat[i + 1]) or 0
    if w and n > 0 and routers[ssub(k, colon + 1)] then
      if tokens then w.prefill = w.prefill + n else w.inflight = w.inflight + n end
    end
  end
  return c
end

-- Probing state `p`: chain, now, at and syncing (routing_view's), probes
-- made, and values (hash -> forward value read, false for none: claims
-- reuse them).
-- Marks each worker holding block pos (of `chain`, default p.chain) with
-- w.hit = pos and w.level = the tier level it holds it at (LEVEL in
-- lib_entries.lua), and returns them; of p.chain's blocks, also w.deepest and
-- w.deep_level, the deepest it was seen holding. It
-- walks the forward value's few entries (and the workers applying a sync),
-- not the fleet: probing costs O(holders), whatever the fleet's size.
local function probe_holders(p, pos, chain)
  local h, bucket = packed_hash(chain or p.chain, pos)
  p.probes = p.probes + 1
  local v = redis.call('HGET', bucket, h) or nil
  p.values[h] = v or false
  local out = {}
  if v then
    for idx, kind, exp in string.gmatch(v, '(%d+)([schd])(%d+)') do
      local w = p.at[idx]
      if w and not w.syncing and alive(kind, tonumber(exp), w, p.now) then
        w.hit, w.level = pos, LEVEL[kind]
        out[#out + 1] = w
      end
    end
  end
  for _, w in ipairs(p.syncing) do
    local kind, exp = entry_of(v, w.idx)
    local level = held_level(kind, exp, w, h, p.now)
    if level > 0 then
      w.hit, w.level = pos, level
      out[#out + 1] = w
    end
  end
  if not chain then
    for _, w in ipairs(out) do
      if pos > w.deepest then w.deepest, w.deep_level = pos, w.level end
    end
  end
  return out
end

-- Every worker of `set` holds block lo at tier level >= L (LEVEL in
-- lib_entries.lua; L = 1: on any tier), or lo == 0, and block hi + 1 below it:
-- sets w[field] to the deepest such block, probing O(log(hi - lo)) blocks
-- per group of workers that answer alike.
local function probe_search(p, set, lo, hi, L, field)
  if #set == 0 then return end
  if lo == hi then
    for _, w in ipairs(set) do w[field] = lo end
    return
  end
  local mid = math.floor((lo + hi + 1) / 2)
  probe_holders(p, mid)
  local yes, no = {}, {}
  for _, w in ipairs(set) do
    if w.hit == mid and w.level >= L then yes[#yes + 1] = w else no[#no + 1] = w end
  end
  probe_search(p, yes, mid, hi, L, field)
  probe_search(p, no, lo, mid - 1, L, field)
end

-- Sets w.matched, for each worker of routing_view's fleet, to the leading
-- blocks of the packed chain it holds, found by probing O(log n) blocks per
-- distinct depth instead of scanning them all. Sound because holdings are
-- prefix-closed: a block's hash chains its parent, vLLM frees a request's
-- blocks tail first so LRU evicts a prefix's tail before its head, and
-- claims cover a contiguous run. probe.lua scans every block (exact, for
-- explain and operators). Probe order: the tip (a warm prompt is done in
-- one probe), then block 1 (a cold one in two), then block n - 1 (a warm
-- prefix with a new last block in three), then a binary search per group
-- of workers. A worker that holds no block 1 matches 0 without being
-- visited. Returns the probing state (see probe_holders).
local function probe_chain(at, syncing, chain, now)
  local n = math.floor(#chain / 8)
  local p = { chain = chain, now = now, at = at, syncing = syncing, probes = 0, values = {} }
  if n == 0 or next(at) == nil then return p end
  for _, w in ipairs(probe_holders(p, n)) do w.matched = n end
  if n == 1 then return p end
  local head = {}
  for _, w in ipairs(probe_holders(p, 1)) do
    if w.matched == 0 then head[#head + 1] = w end
  end
  if #head == 0 then return p end
  -- A seen prompt with a new last block (a new question or turn) is
  -- common: try n - 1 before bisecting.
  if n > 2 then
    probe_holders(p, n - 1)
    local fewer = {}
    for _, w in ipairs(head) do
      if w.hit == n - 1 then w.matched = n - 1 else fewer[#fewer + 1] = w end
    end
    probe_search(p, fewer, 1, n - 2, 1, 'matched')
  else
    for _, w in ipairs(head) do w.matched = 1 end
  end
  return p
end

-- After probe_chain: sets w.gpu and w.cpu, the leading indexed blocks each
-- worker holds on the GPU, and on the CPU or the GPU. Tiers are
-- prefix-closed too (an engine offloads and evicts a chain's tail first),
-- so each is a prefix of w.matched, found by bisection below it; a worker
-- whose deepest block is on the GPU (every worker, in a fleet without
-- tiers) costs nothing more.
-- One tier's pass of probe_tiers: level L, depth in w[field]. Allocates
-- nothing unless a worker's deepest block is below L.
local function probe_tier(p, list, L, field)
  local groups, order = nil, nil
  for _, w in ipairs(list) do
    local k = w.matched
    if k == 0 or (w.deepest == k and w.deep_level >= L) then
      w[field] = k
    else
      -- Below k: from the GPU depth for the CPU's (held at a level >= 2).
      local lo = L == 2 and w.gpu or 0
      local key = lo * 65536 + k
      groups, order = groups or {}, order or {}
      if not groups[key] then
        groups[key] = { lo = lo, hi = k - 1 }
        order[#order + 1] = key
      end
      local g = groups[key]
      g[#g + 1] = w
    end
  end
  if not order then return end
  for _, key in ipairs(order) do
    local g = groups[key]
    probe_search(p, g, g.lo, g.hi, L, field)
  end
end

local function probe_tiers(p, list)
  probe_tier(p, list, 3, 'gpu')
  probe_tier(p, list, 2, 'cpu')
end

-- Tips and branch points between indexed blocks (protocol::index): a
-- worker holding the first k indexed blocks of the chain but not block
-- k + 1 surely holds covered(k) blocks, and may hold an indexed block
-- before the next indexed one (the end of an earlier prompt, a branch
-- point). For the workers with the deepest such k (a shallower worker's
-- gap ends below their floor, so it cannot overtake them), the gap's
-- blocks that `full` (the chain's first blocks, every one, packed) covers
-- are probed deepest first, and a worker holding one is credited up to it
-- (w.matched, in blocks, as route.lua keeps it after covered()), and so
-- are its GPU and CPU depths (w.gpu, w.cpu, in blocks too) that reached
-- its old match, at the block's tier. At most S - 1 probes.
local function probe_gaps(p, list, full, nindexed, head, stride)
  local k, n = 0, 0
  for _, w in ipairs(list) do
    local wk = w.indexed
    if wk < nindexed then
      if wk > k then k, n = wk, 1 elseif wk == k then n = n + 1 end
    end
  end
  if k == 0 then return end
  local lo = covered(k, head, stride)
  local hi = math.min(covered(k + 1, head, stride) - 1, math.floor(#full / 8))
  for b = hi, lo + 1, -1 do
    if n == 0 then return end
    for _, w in ipairs(probe_holders(p, b, full)) do
      if w.indexed == k and w.matched < b then
        if w.level >= 3 and w.gpu == w.matched then w.gpu = b end
        if w.level >= 2 and w.cpu == w.matched then w.cpu = b end
        w.matched, n = b, n - 1
      end
    end
  end
end
