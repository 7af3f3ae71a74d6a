-- lib.lua: helpers shared by every script. The loader (src/state/scripts.rs)
-- prepends this file to each script before SCRIPT LOAD; it is not a script.
--
-- KEYS contract shared by all scripts: KEYS[1] = "<base>:ids", where
-- base = "<ns>:{<model>}" is ARGV[1]. Other keys are built from base and
-- share its hash tag, so every script touches exactly one cluster slot.
--
-- Forward-map value: comma-separated entries "<idx><kind><expiry_s>":
--   idx = worker incarnation, kind = 's' (speculative) or 'c' (confirmed),
--   expiry_s = unix seconds. Example: "3c1763712345,12s1763712301".
-- Per incarnation: r:<idx> holds every hash it has an entry for, sp:<idx>
-- the subset whose entry is speculative.

local BASE = ARGV[1]
if KEYS[1] ~= BASE .. ':ids' then
  return redis.error_reply('ERR KEYS[1] must be ' .. BASE .. ':ids')
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
local function inflight_key(idx) return BASE .. ':inflight:' .. idx end

-- idx's entry in a forward value: kind, expiry, and its span in ',' .. v.
local function entry_of(v, idx)
  if not v then return nil end
  local s, e, kind, exp = string.find(',' .. v, ',' .. idx .. '([sc])(%d+)')
  if not s then return nil end
  return kind, tonumber(exp), s, e
end

-- v with idx's entry set to kind/exp (replaced, or appended).
local function with_entry(v, idx, kind, exp)
  local token = idx .. kind .. string.format('%d', exp)
  if not v then return token end
  local k, _, s, e = entry_of(v, idx)
  if not k then return v .. ',' .. token end
  local pv = ',' .. v
  return string.sub(pv, 2, s - 1) .. (s > 1 and ',' or '') .. token .. string.sub(pv, e + 1)
end

-- v without idx's entry; nil when nothing is left.
local function without_entry(v, idx)
  local k, _, s, e = entry_of(v, idx)
  if not k then return v end
  local pv = ',' .. v
  local rest = string.sub(pv, 1, s - 1) .. string.sub(pv, e + 1)
  if rest == '' then return nil end
  return string.sub(rest, 2)
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

-- Removes idx's entry for h from the forward map; true if one was there.
local function fwd_remove(h, idx)
  local v = fwd_read(h)
  if not entry_of(v, idx) then return false end
  fwd_write(h, without_entry(v, idx))
  return true
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
  return kind == 'c' and ws.synced_until > now
end

-- Does worker ws hold h, given h's forward value v? While a sync is being
-- applied, its target set is the worker's confirmed membership.
local function holds(v, ws, h, now)
  local kind, exp = entry_of(v, ws.idx)
  if kind and (kind == 's' or not ws.syncing) and alive(kind, exp, ws, now) then return true end
  if ws.syncing then
    return redis.call('SISMEMBER', sync_target_key(ws.idx), h) == 1
  end
  return false
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

-- One call for a whole list (no-op when empty): SADD/SREM/SMISMEMBER.
local function set_call(cmd, key, list)
  if #list == 0 then return {} end
  return redis.call(cmd, key, unpack(list))
end

-- Live routers (lease in the future), as a set, for summing in-flight gauges.
local function live_routers(now)
  local set = {}
  for _, r in ipairs(redis.call('ZRANGEBYSCORE', BASE .. ':routers', '(' .. now, '+inf')) do
    set[r] = true
  end
  return set
end

-- Live incarnations with their lease expiry: {idx, lease, idx, lease, ...}.
local function live_leases(now)
  return redis.call('ZRANGEBYSCORE', BASE .. ':leases', '(' .. now, '+inf', 'WITHSCORES')
end

-- Everything routing and operators need to know about one incarnation, as a
-- flat array of 10 strings: id, url, inflight, waiting, running, kv_usage,
-- load_age_ms (-1 if never reported), lease_left_ms, blocks, syncing.
local function worker_info(idx, lease, now, routers)
  local f = redis.call('HMGET', worker_key(idx), 'id', 'url', 'waiting', 'running', 'kv_usage', 'load_ms', 'syncing')
  local inflight = 0
  local counts = redis.call('HGETALL', inflight_key(idx))
  for i = 1, #counts, 2 do
    if routers[counts[i]] then inflight = inflight + math.max(0, tonumber(counts[i + 1]) or 0) end
  end
  local load_ms = tonumber(f[6])
  return {
    f[1] or '', f[2] or '', tostring(inflight), f[3] or '0', f[4] or '0', f[5] or '0',
    load_ms and tostring(now - load_ms) or '-1',
    lease and tostring(lease - now) or '-1',
    tostring(redis.call('SCARD', reverse_key(idx))), f[7] or '0',
  }
end

-- Leading blocks of the chain ARGV[first..] that each live worker holds.
-- live = live_leases(now). Returns states, matched (per worker position) and
-- the number of blocks scanned; stops at the first block nobody holds.
local function match_chain(live, first, now)
  local states, matched, active = {}, {}, {}
  for i = 1, #live / 2 do
    states[i] = worker_state(live[2 * i - 1])
    matched[i] = 0
    active[i] = i
  end
  local scanned = 0
  for n = first, #ARGV do
    if #active == 0 then break end
    local h = ARGV[n]
    scanned = scanned + 1
    local v = fwd_read(h)
    local still = {}
    for _, i in ipairs(active) do
      if holds(v, states[i], h, now) then
        matched[i] = n - first + 1
        still[#still + 1] = i
      end
    end
    active = still
  end
  return states, matched, scanned
end

-- Speculative insert, for worker state ws, of each hash in `hashes` it does
-- not hold yet; returns how many were inserted.
local function claim_blocks(ws, hashes, exp, now)
  local added = {}
  for _, h in ipairs(hashes) do
    local v = fwd_read(h)
    if not holds(v, ws, h, now) then
      fwd_write(h, with_entry(v, ws.idx, 's', exp))
      added[#added + 1] = h
    end
  end
  set_call('SADD', reverse_key(ws.idx), added)
  set_call('SADD', spec_key(ws.idx), added)
  if ws.syncing then set_call('SADD', sync_target_key(ws.idx), added) end
  return #added
end
