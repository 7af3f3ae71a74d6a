-- evict.lua: remove a batch of blocks the worker evicted, from both maps.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3..] = block hashes (16 hex digits).
-- Hashes the worker does not hold are ignored (reports may repeat). An
-- eviction removes the entry whatever its tier: a worker reports a block
-- that leaves one medium but stays on another as stored on that one.
-- Confirmed ones leaving the membership are XORed out of its digests with
-- their tier (dg:<idx>; during a sync, those leaving the target s:<idx>,
-- with the target's tier from st:<idx>). A hash listed twice counts once.
-- (The work is evict_blocks, lib_blocks.lua.)
-- Returns the number of entries removed, or the error "ERR unknown worker".
-- Complexity: O(n) for n hashes: one membership probe for the batch, then a
-- forward read and write per held hash. Callers send at most 64 per call.
local bad = check_hashes(3)
if bad then return bad end
local idx = live_idx(ARGV[2], now_ms())
if not idx then return redis.error_reply('ERR unknown worker') end
local left = {}
local removed = evict_blocks(idx, worker_state(idx), unique_args(3), left)
digest_flush(digest_key(idx), left)
return removed
