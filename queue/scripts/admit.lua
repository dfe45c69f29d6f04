-- admit.lua: move a sale's admission forward; run by the admitter (one
-- process at a time, see admit.go) every tick. (See queue.go for the keys.)
--
-- KEYS[1] tickets, KEYS[2] draw, KEYS[3] arrivals (see join.lua)
-- KEYS[4] state    hash   what every instance reads every refresh:
--                         a  how many users are admitted: the first a of the
--                            order (the draw by r, then the arrivals by n)
--                         p  how many users are in the draw, counted at the
--                            first tick after the start (absent before)
--                         th the draw's r of the a-th user ('inf' once the
--                            whole draw is admitted, '-1' while none is): a
--                            user of the draw is admitted when r <= th
--                         closed '1' while admission is stopped (sold out)
--                         ms the Redis time of this tick
-- ARGV[1] how many more users to admit at most
-- ARGV[2] '1' to stop admission (sold out), '0' to go on
-- ARGV[3] the sale's start, Unix ms
-- ARGV[4] when the room's keys expire, Unix ms
--
-- Returns {a, th, p (-1 before the start), a before this tick}.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for i = 1, 3 do
  redis.call('PEXPIREAT', KEYS[i], ARGV[4])
end
if now < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[4], 'closed', ARGV[2], 'ms', now)
  redis.call('PEXPIREAT', KEYS[4], ARGV[4])
  return {0, '-1', -1, 0}
end
local st = redis.call('HMGET', KEYS[4], 'a', 'p')
local p = tonumber(st[2])
if not p then
  -- the first tick after the start: no one joins the draw any more
  p = redis.call('ZCARD', KEYS[2])
end
local a = tonumber(st[1]) or 0
local arrivals = tonumber(redis.call('GET', KEYS[3]) or '0')
local a2 = a
if ARGV[2] ~= '1' then
  a2 = math.max(a, math.min(a + tonumber(ARGV[1]), p + arrivals))
end
local th = '-1'
if a2 >= p then
  th = 'inf'
elseif a2 > 0 then
  th = redis.call('ZRANGE', KEYS[2], a2 - 1, a2 - 1, 'WITHSCORES')[2]
end
redis.call('HSET', KEYS[4], 'a', a2, 'p', p, 'th', th, 'closed', ARGV[2], 'ms', now)
redis.call('PEXPIREAT', KEYS[4], ARGV[4])
return {a2, th, p, a}
