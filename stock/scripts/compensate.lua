-- compensate.lua: give back the stock and the buyer mark of a failed order,
-- exactly once. The buyer hash is the receipt: only while it still maps the
-- user to this order is anything given back, so a repeated call, a call
-- after the user grabbed again, or a call after a rebuild from the database
-- changes nothing.
--
-- KEYS[1] meta    hash   left (the stock), seq, epoch (see grab.lua,
--                 load.lua)
-- KEYS[2] buyers  hash
-- KEYS[3] debt    string (see reconcile.lua)
-- ARGV[1] uid  ARGV[2] the order's local id (decimal)
-- ARGV[3] the local id of the user's order that the database holds ("" if
--         none). Then the order failed as a duplicate: Redis had lost the
--         user's real order, whose unit this one took in its stead. The user
--         keeps that order and the unit stays taken.
-- ARGV[4] pub/sub channel told that stock came back  ARGV[5] message
--
-- Whatever the receipt says, order ids are issued past this one from now
-- on: it may come from a stream that Redis lost, and its id must not be
-- issued again. Whenever the buyers change, the epoch moves, so that
-- instances holding a snapshot of them (taken while sold out) drop it.
--
-- Returns 1 if the stock or mark was handled, 0 if nothing was to be done.
local loaded = redis.call('EXISTS', KEYS[1]) == 1
if loaded and tonumber(ARGV[2]) > (tonumber(redis.call('HGET', KEYS[1], 'seq')) or 0) then
  redis.call('HSET', KEYS[1], 'seq', ARGV[2])
end
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
if loaded then
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  return 1
end
redis.call('HDEL', KEYS[2], ARGV[1])
if tonumber(redis.call('GET', KEYS[3]) or '0') > 0 then
  redis.call('DECR', KEYS[3])
  return 1
end
-- Not loaded, the load to come sets the stock from the database, which
-- holds this failure; meta is not created here, its presence means loaded.
if loaded then
  redis.call('HINCRBY', KEYS[1], 'left', 1)
end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
