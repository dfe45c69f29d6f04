-- force.lua: an administrator's unlock: drop every hold of a lock, whoever
-- holds it, and serve the waiters. The holders learn it at their next
-- renewal, which is refused. (core.lua comes first: it describes the keys.)
--
-- KEYS     K, F, Q, W (see core.lua)
-- ARGV[1]  '0' for Redlock (wake the first waiter instead), default '1'
-- ARGV[2]  chanbase: the channel of a client is chanbase .. its id
--
-- Returns describe's array of strings for what was removed.

local t = now()
local st = load(t)
local removed = describe(st, t)
if st.n > 0 then
	redis.call('del', K)
	serve({n = 0, live = {}, writers = 0, used = {}}, t, ARGV[1] ~= '0', ARGV[2])
end
return removed
