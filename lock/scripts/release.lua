-- release.lua: drop one hold, and give the lock to the waiters that fit.
-- (core.lua comes first: it describes the keys.)
--
-- KEYS     K, F, Q, W (see core.lua)
-- ARGV[1]  hold token
-- ARGV[2]  '0' for Redlock (wake the first waiter instead), default '1'
-- ARGV[3]  chanbase: the channel of a client is chanbase .. its id
-- ARGV[4]  '1' when the client passed this plain mutex on in-process (see
--          cohort.go): the next holder is another client's if one waits
--
-- Returns 1 released (the lock is free, or went to a waiter), 2 released
-- while other holds remain, 0 not held (expired, taken over, or already
-- released: a retried release changes nothing).

local tok = ARGV[1]
local v = redis.pcall('get', K)
if type(v) == 'string' then
	-- a plain mutex: no hold of another to keep
	if string.sub(v, 1, #tok + 1) ~= tok .. ' ' then
		return 0
	end
	local streak = string.match(v, '^%S+ %d+ (%d+)$') -- a local: gopher-lua's match returns nothing
	streak = tonumber(streak) or 0
	if ARGV[4] == '1' then
		streak = streakMax
	end
	local from = string.sub(tok, 1, string.find(tok, '.', 1, true) - 1)
	-- released, though K keeps it until a waiter's hold replaces it (see add)
	local st = {n = 0, live = {}, writers = 0, used = {}, streak = streak, stale = true}
	serve(st, nil, ARGV[2] ~= '0', ARGV[3], from)
	if st.stale then
		redis.call('del', K)
	end
	return 1
end
local t = now()
return release(load(t), tok, t, ARGV[2] ~= '0', ARGV[3])
