-- lib.lua: helpers shared by every script. The loader (src/state/scripts.rs)
-- builds one Valkey function library: this file, lib_view.lua,
-- lib_routing.lua, then each script's body as a local function, each
-- registered as a function (FUNCTION LOAD, FCALL).
-- So the helpers are defined once per load, not once per call.
--
-- KEYS contract shared by all scripts: KEYS[1] = "<base>:ids", where
-- base = "<ns>:{<model>}" is ARGV[1]. Other keys are built from base and
-- share its hash tag, so every script touches exactly one cluster slot.
-- Hot paths avoid turning numbers into strings (tostring, `..` with a
-- number): Lua formats them with "%.14g", about 1 µs each. Replies carry
-- numbers as RESP integers instead; keys use string.format('%d').
-- KEYS, ARGV and BASE are the library's locals, set by `enter` (below) at
-- the start of every call; the scripts read them as plain Lua scripts would.
--
-- Forward-map value: comma-separated entries "<idx><kind><expiry_s>":
--   idx = worker incarnation, kind = 's' (speculative: a routed request
--   will compute the block onto the GPU) or a confirmed kind naming the
--   best tier the worker holds the block on: 'c' GPU, 'h' CPU (host
--   memory), 'd' disk (or any other offload tier); expiry_s = unix seconds.
--   Example: "3c1763712345,12s1763712301,7h1763712399".
-- Per incarnation: r:<idx> holds every hash it has an entry for, sp:<idx>
-- the subset whose entry is speculative, dg:<idx> the digests of its
-- confirmed membership and tiers (below); while a sync is applied, s:<idx>
-- is its target membership and st:<idx> the target's tiers (hash -> 'h' or
-- 'd'; absent: GPU).

local KEYS, ARGV, BASE = {}, {}, ''
-- Library functions the hot paths call, as upvalues (a global's lookup is
-- two table reads), and HEX[byte] = two hex digits. Set on the first call:
-- while FUNCTION LOAD runs this file, only `redis` is reachable.
local sbyte, sfind, ssub, HEX

-- Binds one call's KEYS and ARGV, checks the KEYS contract, runs `body`.
local bridge_write_gap

-- Every function's entry: sets KEYS, ARGV and BASE, checks KEYS[1]; a
-- function that writes (`writes`) first bridges a write gap
-- (bridge_write_gap, below).
local function enter(keys, args, body, writes)
  if not HEX then
    sbyte, sfind, ssub, HEX = string.byte, string.find, string.sub, {}
    for b = 0, 255 do HEX[b] = string.format('%02x', b) end
  end
  KEYS, ARGV, BASE = keys, args, args[1] or ''
  if KEYS[1] ~= BASE .. ':ids' then
    return redis.error_reply('ERR KEYS[1] must be ' .. BASE .. ':ids')
  end
  if writes then bridge_write_gap() end
  return body()
end

local ROUND8 = { ['0']='0',['1']='0',['2']='0',['3']='0',['4']='0',['5']='0',['6']='0',['7']='0',
                 ['8']='8',['9']='8',a='8',b='8',c='8',d='8',e='8',f='8' }

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function valid_hash(h)
  return #h == 16 and not string.find(h, '[^0-9a-f]')
end

-- 8,192 buckets: the first four hex digits, the fourth rounded down to 0 or 8.
local function bucket_key(h)
  return BASE .. ':f:' .. string.sub(h, 1, 3) .. ROUND8[string.sub(h, 4, 4)]
end

local function worker_key(idx) return BASE .. ':w:' .. idx end
local function reverse_key(idx) return BASE .. ':r:' .. idx end
local function spec_key(idx) return BASE .. ':sp:' .. idx end
local function sync_target_key(idx) return BASE .. ':s:' .. idx end
local function target_tier_key(idx) return BASE .. ':st:' .. idx end

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

-- Digests of a worker's confirmed membership, so that an unchanged worker's
-- periodic sync is one comparison (sync_check.lua), not a walk of its set.
-- dg:<idx> is a hash: field = a hash's first two hex digits (256 buckets),
-- value = the XOR of the bucket's confirmed hashes as 16 hex digits (no
-- field: 0). Confirmed membership is r \ sp, or the sync target s while a
-- sync is being applied (sync_commit installs the snapshot's digests).
-- Every script that changes it XORs the hashes in or out, accumulated per
-- call in a table (digest_toggle) and written once (digest_flush).
-- A staged sync's keys (sync_stage.lua, sync_commit.lua, sync_abort.lua):
-- the staged hashes, their digests and their tiers off the GPU.
local function stage_keys(idx, sync_id)
  local tail = idx .. ':' .. sync_id
  return BASE .. ':stage:' .. tail, BASE .. ':stage_dg:' .. tail, BASE .. ':stage_t:' .. tail
end

-- The one member of an aborted sync's stage set (never a hash: those are
-- 16 hex digits). A chunk of the sync was refused: its later chunks and its
-- commit are refused until the stage expires.
local STAGE_ABORTED = 'aborted'

-- Aborts staged sync `sync_id` of incarnation `idx`: drops what was staged
-- and leaves the stage set holding STAGE_ABORTED only, for ttl_ms.
local function stage_abort(idx, sync_id, ttl_ms)
  local stage, stage_dg, stage_t = stage_keys(idx, sync_id)
  redis.call('DEL', stage, stage_dg, stage_t)
  redis.call('SADD', stage, STAGE_ABORTED)
  redis.call('PEXPIRE', stage, ttl_ms)
end

-- Whether staged sync `stage` (a stage set's key) was aborted.
local function stage_aborted(stage)
  return redis.call('SISMEMBER', stage, STAGE_ABORTED) == 1
end

local function digest_key(idx) return BASE .. ':dg:' .. idx end

-- XORs the 64-bit value of 16 hex digits x into bucket b of acc. Halves
-- are 32-bit: Lua numbers are doubles, `bit` works mod 2^32.
local function digest_xor(acc, b, x)
  local hi, lo = tonumber(ssub(x, 1, 8), 16), tonumber(ssub(x, 9, 16), 16)
  local a = acc[b]
  if a then
    a[1], a[2] = bit.bxor(a[1], hi), bit.bxor(a[2], lo)
  else
    acc[b] = { bit.bxor(hi, 0), bit.bxor(lo, 0) }
  end
end

-- Adds block h, held confirmed as `kind`, to the accumulator: XOR is its
-- own inverse, so one call toggles it in or out. A block on the GPU ('c',
-- or nil) adds h itself, so digests written before tiers stay valid; one
-- on the CPU ('h') or disk ('d') also adds h's last seven bytes rotated by
-- one or two bytes (protocol::index::tier_mix): a lost tier change then
-- shows as a differing bucket, as a lost store does.
local function digest_toggle(acc, h, kind)
  local b = ssub(h, 1, 2)
  digest_xor(acc, b, h)
  if kind == 'h' then
    digest_xor(acc, b, '00' .. ssub(h, 5, 16) .. ssub(h, 3, 4))
  elseif kind == 'd' then
    digest_xor(acc, b, '00' .. ssub(h, 7, 16) .. ssub(h, 3, 6))
  end
end

-- XORs an accumulator into key (a digest hash) with one read and one write.
local function digest_flush(key, acc)
  local fields = {}
  for b in pairs(acc) do fields[#fields + 1] = b end
  if #fields == 0 then return end
  local old = redis.call('HMGET', key, unpack(fields))
  local set, del = {}, {}
  for i, b in ipairs(fields) do
    local hi, lo = acc[b][1], acc[b][2]
    local v = old[i]
    if v then
      hi = bit.bxor(hi, tonumber(ssub(v, 1, 8), 16))
      lo = bit.bxor(lo, tonumber(ssub(v, 9, 16), 16))
    end
    if hi == 0 and lo == 0 then
      del[#del + 1] = b
    else
      set[#set + 1] = b
      set[#set + 1] = bit.tohex(hi, 8) .. bit.tohex(lo, 8)
    end
  end
  if #set > 0 then redis.call('HSET', key, unpack(set)) end
  if #del > 0 then redis.call('HDEL', key, unpack(del)) end
end

-- Seconds, rounded up, so that an entry never expires before its TTL.
local function expiry_s(now, ttl_ms)
  return math.ceil((now + ttl_ms) / 1000)
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

-- The live incarnation of a worker id, or nil when unknown or its lease expired.
local function live_idx(worker_id, now)
  local idx = redis.call('HGET', BASE .. ':ids', worker_id)
  if not idx then return nil end
  local lease = tonumber(redis.call('ZSCORE', BASE .. ':leases', idx))
  if not lease or lease <= now then return nil end
  return idx
end

local function check_hashes(first)
  for i = first, #ARGV do
    if not valid_hash(ARGV[i]) then
      return redis.error_reply('ERR bad block hash at ARGV[' .. i .. ']')
    end
  end
  return nil
end

-- ARGV[first..], each hash once (in first-seen order). Scripts that probe
-- the sync target once per batch (stored, evict) need it: a hash listed
-- twice would be judged twice against the same stale probe, and its
-- digest term toggled twice (in and straight back out).
local function unique_args(first)
  local out, seen = {}, {}
  for i = first, #ARGV do
    local h = ARGV[i]
    if not seen[h] then
      seen[h] = true
      out[#out + 1] = h
    end
  end
  return out
end

-- One call for a whole list (no-op when empty): SADD/SREM/SMISMEMBER.
local function set_call(cmd, key, list)
  if #list == 0 then return {} end
  return redis.call(cmd, key, unpack(list))
end

-- Live routers (lease in the future), as a set, for summing in-flight gauges.
local function live_routers(now)
  local set = {}
  for _, r in ipairs(redis.call('ZRANGEBYSCORE', BASE .. ':routers', string.format('(%d', now), '+inf')) do
    set[r] = true
  end
  return set
end

-- Live incarnations with their lease expiry: {idx, lease, idx, lease, ...}.
local function live_leases(now)
  return redis.call('ZRANGEBYSCORE', BASE .. ':leases', string.format('(%d', now), '+inf', 'WITHSCORES')
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
