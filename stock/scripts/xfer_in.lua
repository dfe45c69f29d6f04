-- xfer_in.lua: the second half of a transfer (see xfer_out.lua): credit
-- the units to this bucket, exactly once: the credit set is the receipt.
-- Units owed (debt, see reconcile.lua) are paid first.
--
-- KEYS[1] meta     hash   left (the stock), and in: the units this bucket
--                         ever received
-- KEYS[2] debt     string
-- KEYS[3] credits  set    the ids of the transfers credited here
-- ARGV[1] transfer id  ARGV[2] units
--
-- Returns 1 if credited now, 0 if before, -1 if the bucket is not loaded
-- (the transfer stays in the sender's journal).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('SADD', KEYS[3], ARGV[1]) == 0 then
  return 0
end
local k = tonumber(ARGV[2])
redis.call('HINCRBY', KEYS[1], 'in', k)
local debt = tonumber(redis.call('GET', KEYS[2]) or '0')
if debt > 0 then
  local pay = math.min(debt, k)
  redis.call('DECRBY', KEYS[2], pay)
  k = k - pay
end
if k > 0 then
  redis.call('HINCRBY', KEYS[1], 'left', k)
end
return 1
