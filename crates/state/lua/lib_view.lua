-- lib_view.lua: the routing view (one hash routing reads whole), its
-- count fields and the read-only fleet listing built on it. Loaded right
-- after lib_entries.lua into the same library (crates/state/src/scripts.rs),
-- before lib_leases.lua and lib_routing.lua.
-- KEYS/ARGV: none of its own; every key comes from BASE, as in lib.lua.

-- The routing view: one hash that routing reads with a single HGETALL,
-- instead of the leases, the routers and every record.
-- Field <idx> = the routing part of the worker's record: VIEW_FIELDS 1-7
-- packed as little-endian doubles (-1 when unset; struct.unpack reads them
-- in one C call, where parsing text cost about 1 us per record), then
-- id .. '\n' .. url, then '\n' .. role only for a prefill or decode worker
-- (a record without it is a worker of both roles, as every record written
-- before roles existed). A draining worker's record (its `drain_until` set,
-- drain.lua) has lease_until -1 here, so routing skips it. Field <idx>:<router> = that router's in-flight count
-- for <idx>; field p<idx>:<router> = the uncached prompt tokens of those
-- requests still before their first token (the prefill queue it put on
-- <idx>); field router:<router> = that router's lease expiry (ms, as in
-- `routers`). The record and the sorted sets stay the source of truth; every
-- script that changes a viewed value updates the view in the same call.
-- The most requests a load figure may say (protocol::MAX_REPORTED_REQUESTS):
-- a larger one is a broken report, and past 2^63 it would turn into a
-- negative RESP integer in every reply that lists the worker.
local MAX_REPORTED = 1000000
local function bounded_count(x)
  x = tonumber(x) or 0
  if x ~= x or x < 0 then return 0 end
  if x > MAX_REPORTED then return MAX_REPORTED end
  return math.floor(x)
end

local VIEW_FIELDS = { 'lease_until', 'synced_until', 'syncing', 'waiting', 'running', 'kv_usage', 'load_ms', 'id', 'url',
  'role', 'drain_until' }
local VIEW_PACK, VIEW_NUMBERS, VIEW_BYTES = '<ddddddd', 7, 56
local ROUTER_FIELD = 'router:'
local function view_key() return BASE .. ':view' end
local function inflight_field(idx, router) return idx .. ':' .. router end
local function prefill_field(idx, router) return 'p' .. idx .. ':' .. router end

-- Adds delta to a count field of the view; a count never goes below zero,
-- and a zero count is removed. Returns the new count.
local function view_count_add(field, delta)
  local n = redis.call('HINCRBY', view_key(), field, delta)
  if n <= 0 then
    redis.call('HDEL', view_key(), field)
    n = 0
  end
  return n
end

local function view_refresh(idx)
  local f = redis.call('HMGET', worker_key(idx), unpack(VIEW_FIELDS))
  if not f[8] then return end -- purged
  local n = {}
  for i = 1, VIEW_NUMBERS do n[i] = tonumber(f[i]) or -1 end
  if f[11] then n[1] = -1 end -- draining (drain.lua): routing skips it
  local role = ''
  if f[10] and f[10] ~= '' and f[10] ~= 'both' then role = '\n' .. f[10] end
  redis.call('HSET', view_key(), idx, struct.pack(VIEW_PACK, unpack(n)) .. f[8] .. '\n' .. (f[9] or '') .. role)
end

-- A view record's values by VIEW_FIELDS name (nil when unset), or nil when
-- it is not a record.
local function view_decode(v)
  if #v < VIEW_BYTES then return nil end
  local rec = { struct.unpack(VIEW_PACK, v) }
  for i = 1, VIEW_NUMBERS do
    local x = rec[i]
    rec[i] = nil
    if x >= 0 then rec[VIEW_FIELDS[i]] = x end
  end
  rec.id, rec.url, rec.role = string.match(string.sub(v, VIEW_BYTES + 1), '^([^\n]*)\n([^\n]*)\n?(.*)$')
  if rec.role == '' then rec.role = nil end
  return rec
end

-- Removes idx and its in-flight counts (requests and prefill tokens) from
-- the view.
local function view_drop(idx)
  local fields = { idx }
  for _, pattern in ipairs({ idx .. ':*', 'p' .. idx .. ':*' }) do
    local res = redis.call('HSCAN', view_key(), 0, 'MATCH', pattern, 'COUNT', 100000)
    for i = 1, #res[2], 2 do fields[#fields + 1] = res[2][i] end
  end
  redis.call('HDEL', view_key(), unpack(fields))
end

-- Removes router r's in-flight counts (requests and prefill tokens) from
-- the view.
local function view_drop_router(r)
  local fields = { ROUTER_FIELD .. r }
  for _, k in ipairs(redis.call('HKEYS', view_key())) do
    if string.find(k, '^%d+$') then
      fields[#fields + 1] = inflight_field(k, r)
      fields[#fields + 1] = prefill_field(k, r)
    end
  end
  if #fields > 0 then redis.call('HDEL', view_key(), unpack(fields)) end
end

-- The routing view of every worker in one HGETALL: recs[idx] = record
-- fields by name, inflight[idx] = in flight summed over live routers,
-- prefill[idx] = their prompt tokens still before a first token.
local function fleet_view(routers)
  local flat = redis.call('HGETALL', view_key())
  local recs, inflight, prefill = {}, {}, {}
  for i = 1, #flat, 2 do
    local k, v = flat[i], flat[i + 1]
    local p, idx, router = string.match(k, '^(p?)(%d+):(.+)$')
    if idx then
      if routers[router] then
        local sums = p == '' and inflight or prefill
        sums[idx] = (sums[idx] or 0) + math.max(0, tonumber(v) or 0)
      end
    elseif string.find(k, '^%d+$') then
      recs[k] = view_decode(v)
    end
  end
  return { recs = recs, inflight = inflight, prefill = prefill }
end

-- idx's record from the view, else (not yet viewed) from the record itself.
local function view_record(view, idx)
  local rec = view.recs[idx]
  if rec then return rec end
  local f = redis.call('HMGET', worker_key(idx), unpack(VIEW_FIELDS))
  rec = {}
  for i = 1, VIEW_NUMBERS do rec[VIEW_FIELDS[i]] = tonumber(f[i]) end
  rec.id, rec.url, rec.role = f[8], f[9], f[10]
  view.recs[idx] = rec
  return rec
end

-- Everything operators need to know about one incarnation, as a flat array
-- of 12 values: id, url, inflight, waiting, running, kv_usage, load_age_ms
-- (-1 if never reported), lease_left_ms, blocks, syncing, prefill tokens
-- in flight (before their first token), role (prefill, decode or both). Counts and times
-- are numbers (RESP integers in a reply); kv_usage is a string (a fraction).
local function worker_info(idx, lease, now, view)
  local rec = view_record(view, idx)
  return {
    rec.id or '', rec.url or '', view.inflight[idx] or 0, bounded_count(rec.waiting), bounded_count(rec.running),
    tostring(rec.kv_usage or 0), rec.load_ms and now - rec.load_ms or -1,
    lease and lease - now or -1, redis.call('SCARD', reverse_key(idx)), rec.syncing or 0,
    view.prefill[idx] or 0, (rec.role ~= nil and rec.role ~= '') and rec.role or 'both',
  }
end
