-- flow_leave.lua: requests leave the fleet-wide waiting room of a model:
-- a waiting one that timed out, was shed or whose client went away (its
-- tenant is not charged for it: tags advance only at dispatch), or a
-- dispatched one now routed (its place in the free capacity is then held
-- by its in-flight count). Keys as in flow_dispatch.lua.
-- KEYS[1] = <base>:ids (the model's first part)
-- ARGV[1] = base, ARGV[2] = n, then n pairs (member "router\tseq\t
-- deadline ms", its priority, or '' for a dispatched member).
-- Returns the number of entries removed.
-- Complexity: O(n log N).
local removed = 0
for i = 3, 2 + 2 * (tonumber(ARGV[2]) or 0), 2 do
  local member, p = ARGV[i], ARGV[i + 1]
  if p == '' then
    removed = removed + redis.call('ZREM', BASE .. ':fg', member)
  elseif p then
    local owners = BASE .. ':fm:' .. p
    local tenant = redis.call('HGET', owners, member)
    if tenant then
      local q = BASE .. ':fe:' .. p .. ':' .. tenant
      removed = removed + redis.call('ZREM', q, member)
      redis.call('HDEL', owners, member)
      if redis.call('ZCARD', q) == 0 then
        local tenants = BASE .. ':fk:' .. p
        redis.call('ZREM', tenants, tenant)
        if redis.call('ZCARD', tenants) == 0 then redis.call('ZREM', BASE .. ':fb', p) end
      end
    end
  end
end
return removed
