-- probe.lua: read-only prefix match of a chain of blocks against live workers.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2..] = the request's block hashes in chain order.
-- For each live worker but the draining ones (drain.lua): the number of leading blocks of the chain it holds
-- (on any tier), of them those it holds on the GPU and those on the CPU or
-- the GPU (each counted up to its first block on a lower tier), plus its
-- load. The scan stops at the first block no remaining worker holds.
-- Returns {blocks scanned, then per worker 15 values: matched blocks, GPU
-- blocks, CPU-or-GPU blocks, then worker_info's 12 fields (see lib_view.lua)}.
-- Complexity: O(matched blocks x live workers holding them + live workers);
-- callers send at most 1024 hashes per call.
local bad = check_hashes(2)
if bad then return bad end
local now = now_ms()
local live = {}
local leased = live_leases(now)
for i = 1, #leased, 2 do
  if not redis.call('HGET', worker_key(leased[i]), 'drain_until') then
    live[#live + 1] = leased[i]
    live[#live + 1] = leased[i + 1]
  end
end
local _, matched, scanned, gpu, cpu = match_chain(live, 2, now)
local view = fleet_view(live_routers(now))
local out = { scanned }
for i = 1, #live / 2 do
  out[#out + 1] = matched[i]
  out[#out + 1] = gpu[i]
  out[#out + 1] = cpu[i]
  for _, v in ipairs(worker_info(live[2 * i - 1], tonumber(live[2 * i]), now, view)) do
    out[#out + 1] = v
  end
end
return out
