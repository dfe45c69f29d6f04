-- release_id.lua: release a semaphore hold by its id (its hold token), from
-- any client (Semaphore.Release), and give the permits to the waiters that
-- fit, as release.lua does. (core.lua and lib.lua come first: they
-- describe the keys.) The hold token names one acquisition, never reused:
-- the release can only drop that hold.
--
-- KEYS     K, F, Q, W (see core.lua)
-- ARGV[1]  hold token
-- ARGV[2]  chanbase: the channel of a client is chanbase .. its id
--
-- Returns 1 released (the semaphore is free, or its permits went to
-- waiters), 2 released while other holds remain, 0 when the semaphore has
-- no live hold of that token (released already, expired, never held, or
-- the name is no semaphore): nothing is changed.

local t = now()
local st = load(t)
if st.kind ~= 's' then
	return 0
end
return release(st, ARGV[1], t, true, ARGV[2])
