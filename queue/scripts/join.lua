-- join.lua: give a user a ticket of a sale's waiting room, once. (See
-- queue.go for the keys.)
--
-- KEYS[1] tickets  hash   <uid> -> the user's ticket: "p<r>" for a user who
--                         joined before the start (r a random 53-bit
--                         integer: the user's place in the draw), "s<n>"
--                         for the n-th user to join after it
-- KEYS[2] draw     zset   the users who joined before the start, scored by r
-- KEYS[3] arrivals string how many users joined after the start
-- ARGV[1] uid
-- ARGV[2] r, drawn by the caller (crypto/rand); used only before the start
-- ARGV[3] the sale's start, Unix ms
-- ARGV[4] the sale's end, Unix ms
-- ARGV[5] when the room's keys expire, Unix ms (set as the first ticket is)
--
-- Returns the user's ticket (an existing one if the user joined before),
-- or "e" once the sale has ended. Before or after the start is decided by
-- the Redis clock, the one admit.lua reads: a user in the draw joined before
-- the draw was counted.
local have = redis.call('HGET', KEYS[1], ARGV[1])
if have then
  return have
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if now >= tonumber(ARGV[4]) then
  return 'e'
end
local v
if now < tonumber(ARGV[3]) then
  v = 'p' .. ARGV[2]
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
else
  v = 's' .. redis.call('INCR', KEYS[3])
end
redis.call('HSET', KEYS[1], ARGV[1], v)
if redis.call('HLEN', KEYS[1]) == 1 then
  for i = 1, 3 do
    redis.call('PEXPIREAT', KEYS[i], ARGV[5])
  end
end
return v
