-- lib_sync.lua: what the sync scripts share: the digests of a worker's
-- confirmed membership and the keys of a staged snapshot. Loaded right
-- after lib.lua into the same library (crates/state/src/scripts.rs).
-- KEYS/ARGV: none of its own; every key comes from BASE, as in lib.lua.

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

-- Digests of a worker's confirmed membership, so that an unchanged worker's
-- periodic sync is one comparison (sync_check.lua), not a walk of its set.
-- dg:<idx> is a hash: field = a hash's first two hex digits (256 buckets),
-- value = the XOR of the bucket's confirmed hashes as 16 hex digits (no
-- field: 0). Confirmed membership is r \ sp, or the sync target s while a
-- sync is being applied (sync_commit installs the snapshot's digests).
-- Every script that changes it XORs the hashes in or out, accumulated per
-- call in a table (digest_toggle) and written once (digest_flush).

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
