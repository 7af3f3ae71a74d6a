-- sync_repair.lua: the removing half of a repair (a sync of a few digest
-- buckets). A worker whose digests differ in a few buckets sends only those
-- buckets' hashes; the router adds what is missing with stored.lua, reads
-- the worker's members of those buckets (SSCAN r:<idx> MATCH, no script)
-- and removes here the ones the worker no longer lists. Live speculative
-- entries stay (routed requests the snapshot predates), as in sync_patch.lua.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = idx (the incarnation whose
-- members the router read), ARGV[4..] = block hashes (16 hex digits).
-- Confirmed hashes leaving the membership are XORed out of its digests
-- (with the tier their entry names).
-- Returns the number of entries removed; "ERR unknown worker" when the
-- worker is not live or is another incarnation now; "ERR syncing" while a
-- full sync is being applied (its patch settles every bucket anyway).
-- Complexity: O(n) for n hashes: one membership probe for the batch, then a
-- forward read and write per removed hash. Callers send at most 128.
local bad = check_hashes(4)
if bad then return bad end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx or idx ~= ARGV[3] then return redis.error_reply('ERR unknown worker') end
if worker_state(idx).syncing then return redis.error_reply('ERR syncing') end
local hashes = { unpack(ARGV, 4) }
local member = set_call('SMISMEMBER', reverse_key(idx), hashes)
local removed, left, drop = 0, {}, {}
for i, h in ipairs(hashes) do
  if member[i] == 1 then
    local v = fwd_read(h)
    local kind, exp = entry_of(v, idx)
    if not (kind == 's' and exp * 1000 > now) then
      if kind then
        fwd_write(h, without_entry(v, idx))
        removed = removed + 1
      end
      if CONFIRMED[kind] then digest_toggle(left, h, kind) end
      drop[#drop + 1] = h
    end
  end
end
set_call('SREM', reverse_key(idx), drop)
set_call('SREM', spec_key(idx), drop)
digest_flush(digest_key(idx), left)
return removed
