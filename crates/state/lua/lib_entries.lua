-- lib_entries.lua: the forward map's entries and what a worker holds:
-- reading and writing a hash's entries, judging them against a worker's
-- state (expiry, a sync being applied), matching a chain and claiming its
-- blocks. Loaded after lib_sync.lua (a claim updates the digests) into the
-- same library (crates/state/src/scripts.rs).
-- KEYS/ARGV: none of its own; every key comes from BASE, as in lib.lua.
--
-- Forward-map value: comma-separated entries "<idx><kind><expiry_s>":
--   idx = worker incarnation, kind = 's' (speculative: a routed request
--   will compute the block onto the GPU) or a confirmed kind naming the
--   best tier the worker holds the block on: 'c' GPU, 'h' CPU (host
--   memory), 'd' disk (or any other offload tier); expiry_s = unix seconds.
--   Example: "3c1763712345,12s1763712301,7h1763712399".

-- The confirmed kinds, and each kind's tier level for routing: 3 GPU, 2
-- CPU, 1 disk (0: not held). A speculative entry counts as GPU: the
-- request routed there computes the blocks onto it.
local CONFIRMED = { c = true, h = true, d = true }
local LEVEL = { s = 3, c = 3, h = 2, d = 1 }
-- The pattern that finds idx's entry in ',' .. v, built once per idx (a
-- library local: it outlives the call; bounded).
local PATTERNS, NPATTERNS = {}, 0
local function entry_pattern(idx)
  local p = PATTERNS[idx]
  if not p then
    if NPATTERNS >= 4096 then PATTERNS, NPATTERNS = {}, 0 end
    p = ',' .. idx .. '([schd])(%d+)'
    PATTERNS[idx], NPATTERNS = p, NPATTERNS + 1
  end
  return p
end

-- idx's entry in a forward value: kind, expiry, and its span in ',' .. v.
local function entry_of(v, idx)
  if not v then return nil end
  local s, e, kind, exp = sfind(',' .. v, entry_pattern(idx))
  if not s then return nil end
  return kind, tonumber(exp), s, e
end

-- v with the entry at span s..e of ',' .. v (from entry_of) replaced by
-- token; token appended when there is none (s nil); token alone for no v.
local function splice(v, s, e, token)
  if not v then return token end
  if not s then return v .. ',' .. token end
  local pv = ',' .. v
  return ssub(pv, 2, s - 1) .. (s > 1 and ',' or '') .. token .. ssub(pv, e + 1)
end

-- v without the entry at span s..e of ',' .. v; nil when nothing is left.
local function unsplice(v, s, e)
  local pv = ',' .. v
  local rest = ssub(pv, 1, s - 1) .. ssub(pv, e + 1)
  if rest == '' then return nil end
  return ssub(rest, 2)
end

-- v with idx's entry set to kind/exp (replaced, or appended).
local function with_entry(v, idx, kind, exp)
  local _, _, s, e = entry_of(v, idx)
  return splice(v, s, e, idx .. kind .. string.format('%d', exp))
end

-- v without idx's entry; nil when nothing is left.
local function without_entry(v, idx)
  local k, _, s, e = entry_of(v, idx)
  if not k then return v end
  return unsplice(v, s, e)
end

local function fwd_read(h)
  local v = redis.call('HGET', bucket_key(h), h)
  if v then return v end
  return nil
end

local function fwd_write(h, v)
  if v then
    redis.call('HSET', bucket_key(h), h, v)
  else
    redis.call('HDEL', bucket_key(h), h)
  end
end

-- Removes idx's entry for h from the forward map; returns its kind, or nil
-- when there was none. One bucket key, one read, one write.
local function fwd_remove(h, idx)
  local key = bucket_key(h)
  local v = redis.call('HGET', key, h) or nil
  local kind, _, s, e = entry_of(v, idx)
  if not kind then return nil end
  local rest = unsplice(v, s, e)
  if rest then
    redis.call('HSET', key, h, rest)
  else
    redis.call('HDEL', key, h)
  end
  return kind
end

-- Worker state needed to judge entries: synced_until (ms) refreshes every
-- confirmed entry a completed sync kept; syncing=1 means a sync is committed
-- and its target set (s:<idx>) is the worker's membership until patched.
local function worker_state(idx)
  local f = redis.call('HMGET', worker_key(idx), 'synced_until', 'syncing')
  return { idx = idx, synced_until = tonumber(f[1]) or 0, syncing = f[2] == '1' }
end

local function alive(kind, exp, ws, now)
  if exp * 1000 > now then return true end
  return kind ~= 's' and ws.synced_until > now
end

-- The tier level (LEVEL) at which worker ws holds h, 0 when it does not,
-- given its entry in h's forward value (kind and expiry, nil when it has
-- none). While a sync is being applied, its target set and the target's
-- tiers are the worker's confirmed membership.
local function held_level(kind, exp, ws, h, now)
  if kind and (kind == 's' or not ws.syncing) and alive(kind, exp, ws, now) then return LEVEL[kind] end
  if ws.syncing and redis.call('SISMEMBER', sync_target_key(ws.idx), h) == 1 then
    local t = redis.call('HGET', target_tier_key(ws.idx), h)
    return t and LEVEL[t] or 3
  end
  return 0
end

-- Does worker ws hold h (on any tier)? As held_level.
local function entry_holds(kind, exp, ws, h, now)
  return held_level(kind, exp, ws, h, now) > 0
end

-- Does worker ws hold h, given h's forward value v?
local function holds(v, ws, h, now)
  local kind, exp = entry_of(v, ws.idx)
  return entry_holds(kind, exp, ws, h, now)
end


-- Leading blocks of the chain ARGV[first..] that each live worker holds.
-- live = live_leases(now). Returns states, matched (per worker position),
-- the leading blocks held on the GPU and those held on the CPU or the GPU
-- (each a prefix of the matched ones), and the number of blocks scanned;
-- stops at the first block nobody holds.
local function match_chain(live, first, now)
  local states, matched, gpu, cpu, active = {}, {}, {}, {}, {}
  for i = 1, #live / 2 do
    states[i] = worker_state(live[2 * i - 1])
    matched[i], gpu[i], cpu[i] = 0, 0, 0
    active[i] = i
  end
  local scanned = 0
  for n = first, #ARGV do
    if #active == 0 then break end
    local h = ARGV[n]
    scanned = scanned + 1
    local v = fwd_read(h)
    local still, depth = {}, n - first + 1
    for _, i in ipairs(active) do
      local kind, exp = entry_of(v, states[i].idx)
      local level = held_level(kind, exp, states[i], h, now)
      if level > 0 then
        matched[i] = depth
        if level >= 3 and gpu[i] == depth - 1 then gpu[i] = depth end
        if level >= 2 and cpu[i] == depth - 1 then cpu[i] = depth end
        still[#still + 1] = i
      end
    end
    active = still
  end
  return states, matched, scanned, gpu, cpu
end

-- Speculative insert, for worker state ws, of each hash in `hashes` it does
-- not hold yet; returns how many were inserted. `values` (optional): forward
-- values already read in this call (hash -> value, false for none).
-- A claim never joins the sync target: a live speculative entry holds by
-- itself, and the patch keeps it (sync_patch.lua).
local function claim_blocks(ws, hashes, exp, now, values)
  local added, lapsed = {}, nil
  local token = ws.idx .. 's' .. string.format('%d', exp)
  for _, h in ipairs(hashes) do
    local v = values and values[h]
    if v == nil then v = fwd_read(h) elseif v == false then v = nil end
    local kind, old, s, e = entry_of(v, ws.idx)
    if not entry_holds(kind, old, ws, h, now) then
      local nv = splice(v, s, e, token)
      fwd_write(h, nv)
      if values then values[h] = nv end
      added[#added + 1] = h
      -- A lapsed confirmed entry turning speculative leaves r \ sp.
      if CONFIRMED[kind] and not ws.syncing then
        lapsed = lapsed or {}
        digest_toggle(lapsed, h, kind)
      end
    end
  end
  set_call('SADD', reverse_key(ws.idx), added)
  set_call('SADD', spec_key(ws.idx), added)
  if lapsed then digest_flush(digest_key(ws.idx), lapsed) end
  return #added
end
