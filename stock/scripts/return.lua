-- return.lua: give back the unit of a cancelled or expired order, exactly
-- once: the database already gave it back (remaining + 1, in the
-- transaction that closed the order); this is the Redis half. The receipt
-- set holds the orders whose units Redis got back: SADD answers 0 when
-- this one is in it already (a repeated call, or a load from a database
-- snapshot that held the return), and nothing is done.
--
-- KEYS[1] meta     hash   loaded? and left (the stock), epoch (see load.lua)
-- KEYS[2] buyers   hash
-- KEYS[3] debt     string units owed (see reconcile.lua): paid first
-- KEYS[4] returned set    receipts: local ids (or "o<order id>" for an id
--                         outside the activity's range, which no mark holds)
-- ARGV[1] uid  ARGV[2] the order's receipt
-- ARGV[3] the local id a buyer mark of the order holds ("" if none can)
-- ARGV[4] "1" if the activity lets the buyer buy again: then the buyer's
--         mark goes, if it still names this order. Without, it stays, and
--         grab.lua answers the buyer with this order, which they see
--         cancelled or expired.
-- ARGV[5] pub/sub channel told that stock came back  ARGV[6] message
--
-- The epoch moves, so that instances holding a snapshot of the buyers of
-- the sold-out activity drop it; the message on ARGV[5] tells them sooner.
--
-- Returns 1 if the unit was given back now, 0 if it was before, -1 if the
-- activity is not loaded (the load that brings it back reads the database,
-- which holds the return).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('SADD', KEYS[4], ARGV[2]) == 0 then
  return 0
end
if ARGV[4] == '1' and ARGV[3] ~= '' and redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[3] then
  redis.call('HDEL', KEYS[2], ARGV[1])
end
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
if tonumber(redis.call('GET', KEYS[3]) or '0') > 0 then
  redis.call('DECR', KEYS[3])
  return 1
end
redis.call('HINCRBY', KEYS[1], 'left', 1)
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
