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

local BASE = ARGV[1]
if KEYS[1] ~= BASE .. ':ids' then
  return redis.error_reply('ERR KEYS[1] must be ' .. BASE .. ':ids')
end

local ROUND4 = { ['0']='0',['1']='0',['2']='0',['3']='0',['4']='4',['5']='4',['6']='4',['7']='4',
                 ['8']='8',['9']='8',a='8',b='8',c='c',d='c',e='c',f='c' }

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function valid_hash(h)
  return #h == 16 and not string.find(h, '[^0-9a-f]')
end

-- 16,384 buckets: the first four hex digits, the fourth rounded down to 0/4/8/c.
local function bucket_key(h)
  return BASE .. ':f:' .. string.sub(h, 1, 3) .. ROUND4[string.sub(h, 4, 4)]
end

local function worker_key(idx) return BASE .. ':w:' .. idx end
local function reverse_key(idx) return BASE .. ':r:' .. idx end
local function sync_target_key(idx) return BASE .. ':s:' .. idx end
local function inflight_key(idx) return BASE .. ':inflight:' .. idx end

local function parse_entries(v)
  local list = {}
  if v then
    for idx, kind, exp in string.gmatch(v, '(%d+)([sc])(%d+)') do
      list[#list + 1] = { idx = idx, kind = kind, exp = tonumber(exp) }
    end
  end
  return list
end

local function encode_entries(list)
  local parts = {}
  for i, e in ipairs(list) do parts[i] = e.idx .. e.kind .. string.format('%d', e.exp) end
  return table.concat(parts, ',')
end

local function fwd_get(h)
  return parse_entries(redis.call('HGET', bucket_key(h), h))
end

local function fwd_put(h, list)
  if #list == 0 then
    redis.call('HDEL', bucket_key(h), h)
  else
    redis.call('HSET', bucket_key(h), h, encode_entries(list))
  end
end

local function find_entry(list, idx)
  for i, e in ipairs(list) do
    if e.idx == idx then return i, e end
  end
  return nil, nil
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

local function entry_alive(e, ws, now)
  if e.exp * 1000 > now then return true end
  return e.kind == 'c' and ws.synced_until > now
end

-- Does worker ws hold h? One forward read plus, while syncing, one set probe.
local function holds(list, ws, h, now)
  local _, e = find_entry(list, ws.idx)
  if e and (e.kind == 's' or not ws.syncing) and entry_alive(e, ws, now) then return true end
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

-- Adds h to the worker's reverse map (and to its sync target while syncing).
local function reverse_add(ws, h)
  redis.call('SADD', reverse_key(ws.idx), h)
  if ws.syncing then redis.call('SADD', sync_target_key(ws.idx), h) end
end

local function reverse_remove(ws, h)
  redis.call('SREM', reverse_key(ws.idx), h)
  if ws.syncing then redis.call('SREM', sync_target_key(ws.idx), h) end
end

-- Removes idx's entry for h from the forward map; true if one was there.
local function fwd_remove(h, idx)
  local list = fwd_get(h)
  local i = find_entry(list, idx)
  if not i then return false end
  table.remove(list, i)
  fwd_put(h, list)
  return true
end

-- Live routers (lease in the future), as a set, for summing in-flight gauges.
local function live_routers(now)
  local set = {}
  for _, r in ipairs(redis.call('ZRANGEBYSCORE', BASE .. ':routers', '(' .. now, '+inf')) do
    set[r] = true
  end
  return set
end

-- Live incarnations, in lease order.
local function live_idxs(now)
  return redis.call('ZRANGEBYSCORE', BASE .. ':leases', '(' .. now, '+inf')
end

-- Everything routing and operators need to know about one incarnation, as a
-- flat array of strings: id, url, inflight, waiting, running, kv_usage,
-- load_age_ms (-1 if never reported), lease_left_ms, blocks, syncing.
local function worker_info(idx, now, routers)
  local f = redis.call('HMGET', worker_key(idx), 'id', 'url', 'waiting', 'running', 'kv_usage', 'load_ms', 'syncing')
  local inflight = 0
  local counts = redis.call('HGETALL', inflight_key(idx))
  for i = 1, #counts, 2 do
    if routers[counts[i]] then inflight = inflight + math.max(0, tonumber(counts[i + 1]) or 0) end
  end
  local lease = tonumber(redis.call('ZSCORE', BASE .. ':leases', idx))
  local load_ms = tonumber(f[6])
  return {
    f[1] or '', f[2] or '', tostring(inflight), f[3] or '0', f[4] or '0', f[5] or '0',
    load_ms and tostring(now - load_ms) or '-1',
    lease and tostring(lease - now) or '-1',
    tostring(redis.call('SCARD', reverse_key(idx))), f[7] or '0',
  }
end
