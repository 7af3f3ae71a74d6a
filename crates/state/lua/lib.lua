-- lib.lua: what every script shares: the KEYS contract, the call's entry
-- (`enter`), key names and argument checks. The loader
-- (crates/state/src/scripts.rs) builds one Valkey function library: this
-- file, lib_sync.lua, lib_entries.lua, lib_blocks.lua, lib_view.lua,
-- lib_leases.lua, lib_routing.lua, then each script's body as a local function, each
-- registered as a function (FUNCTION LOAD, FCALL). So the helpers are
-- defined once per load, not once per call, and a later file uses the
-- locals of the earlier ones.
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
-- Per incarnation: r:<idx> holds every hash it has an entry for, sp:<idx>
-- the subset whose entry is speculative, dg:<idx> the digests of its
-- confirmed membership and tiers (lib_sync.lua); while a sync is applied,
-- s:<idx> is its target membership and st:<idx> the target's tiers (hash ->
-- 'h' or 'd'; absent: GPU).

local KEYS, ARGV, BASE = {}, {}, ''
-- Library functions the hot paths call, as upvalues (a global's lookup is
-- two table reads), and HEX[byte] = two hex digits. Set on the first call:
-- while FUNCTION LOAD runs this file, only `redis` is reachable.
local sbyte, sfind, ssub, HEX

-- Defined in lib_leases.lua; `enter` calls it before a function that writes.
local bridge_write_gap

-- Every function's entry: sets KEYS, ARGV and BASE, checks KEYS[1]; a
-- function that writes (`writes`) first bridges a write gap
-- (bridge_write_gap, lib_leases.lua).
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
local function digest_key(idx) return BASE .. ':dg:' .. idx end

-- Seconds, rounded up, so that an entry never expires before its TTL.
local function expiry_s(now, ttl_ms)
  return math.ceil((now + ttl_ms) / 1000)
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

-- ARGV[first..last] (last: the end), each hash once (in first-seen order).
-- Scripts that probe the sync target once per batch (stored, evict,
-- apply_events) need it: a hash listed twice would be judged twice against
-- the same stale probe, and its digest term toggled twice (in and straight
-- back out).
local function unique_args(first, last)
  local out, seen = {}, {}
  for i = first, last or #ARGV do
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
