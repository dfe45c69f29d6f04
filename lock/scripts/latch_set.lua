-- latch_set.lua: set the count of a countdown latch, if it is zero. (core.lua
-- and lib.lua come first; their lock keys are not this script's.)
--
-- KEYS[1]  L, the latch: a hash, c its count, x its expiry in ms. It exists
--          only while the count is above zero: zero is no key.
-- ARGV[1]  the count, at least 1
-- ARGV[2]  the expiry in ms: Redis deletes the latch once neither this
--          script nor latch_down.lua touched it for that long
--
-- Returns 1 set, 0 not set: the count is above zero.

local L = KEYS[1]
if redis.call('exists', L) == 1 then
	return 0
end
redis.call('hset', L, 'c', ARGV[1], 'x', ARGV[2])
redis.call('pexpire', L, ARGV[2])
return 1
