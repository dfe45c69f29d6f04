-- xfer_out.lua: the first half of a transfer of units between two buckets
-- of an activity (see borrow.go): take them out of this one, and write the
-- transfer in its journal, so that it is completed (xfer_in.lua) even if
-- the process that started it dies.
--
-- KEYS[1] meta     hash   left (the stock), and out: the units this bucket
--                         ever sent
-- KEYS[2] journal  hash   <transfer id> -> "<receiving bucket>:<units>"
-- ARGV[1] units wanted  ARGV[2] transfer id  ARGV[3] the receiving bucket
--
-- Returns the units taken, at most the stock (0 if it is empty), or -1 if
-- the bucket is not loaded.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local k = math.min(tonumber(ARGV[1]), tonumber(redis.call('HGET', KEYS[1], 'left') or '0'))
if k <= 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'left', -k)
redis.call('HINCRBY', KEYS[1], 'out', k)
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. ':' .. string.format('%d', k))
return k
