-- latch_down.lua: count a countdown latch down by one; at zero, open it:
-- delete it and wake its awaiters. (core.lua, contended.lua and lib.lua
-- come first: this script uses now and notify, of contended.lua; their lock
-- keys are not this script's.)
--
-- KEYS[1]  L, the latch (see latch_set.lua)
-- KEYS[2]  A, its awaiters: a hash from an awaiter's hold token to the
--          deadline of its place (ms, Redis clock), or to 'o' once the
--          latch opened while it waited
-- ARGV[1]  chanbase: the channel of a client is chanbase .. its id
-- ARGV[2]  how long an opening's marks last, in ms: the awaiters' longest
--          place
--
-- Returns the count left: 0 when this call opened the latch, and when it
-- was open already (nothing is counted below zero).
--
-- Each awaiter whose place still runs gets the mark 'o' and one message,
-- "<hold token> 0 0", which wakes it to ask (latch_await.lua). The mark
-- tells it the latch opened even if it is set again before the awaiter
-- asks (its message lost, say); awaiters whose place ran out are dropped.

local L, A = KEYS[1], KEYS[2]
local x = redis.call('hget', L, 'x')
if not x then
	return 0
end
local n = redis.call('hincrby', L, 'c', -1)
if n > 0 then
	redis.call('pexpire', L, x)
	return n
end
redis.call('del', L)
local t = now()
local all = redis.call('hgetall', A)
for i = 1, #all, 2 do
	local tok, d = all[i], all[i + 1]
	if d ~= 'o' then
		if tonumber(d) > t then
			redis.call('hset', A, tok, 'o')
			notify(ARGV[1], tok, '0', 0)
		else
			redis.call('hdel', A, tok)
		end
	end
end
redis.call('pexpire', A, ARGV[2])
return 0
