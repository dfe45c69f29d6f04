-- level.lua: read one bucket's units in one atomic step (see borrow.go).
--
-- KEYS[1] meta     hash   loaded? left (the stock), and the transfer
--                         counters: out, the units this bucket sent to
--                         others; in, those it received
-- KEYS[2] debt     string (see reconcile.lua)
-- KEYS[3] journal  hash   the transfers out not yet known to be credited
--
-- Returns {loaded (0 or 1), stock, debt, out, in, transfers in the journal,
-- epoch (a string, see load.lua)}.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, 0, 0, 0, 0, 0, ''}
end
local m = redis.call('HMGET', KEYS[1], 'out', 'in', 'epoch', 'left')
return {1, tonumber(m[4] or '0'), tonumber(redis.call('GET', KEYS[2]) or '0'),
  tonumber(m[1] or '0'), tonumber(m[2] or '0'), redis.call('HLEN', KEYS[3]), m[3] or ''}
