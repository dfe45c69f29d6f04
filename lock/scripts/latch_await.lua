-- latch_await.lua: an awaiter of a countdown latch asks whether it opened,
-- and keeps its place while it did not; or leaves. (core.lua,
-- contended.lua and lib.lua come first: this script uses now and str, of
-- contended.lua; their lock keys are not this script's.)
--
-- KEYS[1]  L, the latch (see latch_set.lua)
-- KEYS[2]  A, its awaiters (see latch_down.lua)
-- ARGV[1]  the awaiter's hold token: its client's id, '.', a number
-- ARGV[2]  '1' to ask and keep the place, '0' to leave
-- ARGV[3]  how long the place lasts unless asked again, in ms
--
-- Returns the count: 0 when the latch is open (zero, or opened since the
-- awaiter took its place: the mark 'o'), when the place is gone too; 0
-- when leaving.

local L, A, tok = KEYS[1], KEYS[2], ARGV[1]
if ARGV[2] == '0' or redis.call('hget', A, tok) == 'o' then
	redis.call('hdel', A, tok)
	return 0
end
local n = tonumber(redis.call('hget', L, 'c') or '0')
if n <= 0 then
	redis.call('hdel', A, tok)
	return 0
end
local ttl = tonumber(ARGV[3])
redis.call('hset', A, tok, str(now() + ttl))
redis.call('pexpire', A, 2 * ttl)
return n
