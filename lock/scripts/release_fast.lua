-- release_fast.lua: release.lua's common contended case, a plain mutex
-- handed to a plain waiter, as promote in lib.lua would (release_free.lua
-- released the one nobody waits for). It runs
-- before lib.lua (see core.lua), and leaves every other case to
-- release.lua, which describes the arguments and the reply: it writes
-- nothing before it knows it can finish. A short call (see core.lua) goes
-- no further.
do
	local tok, chanbase = ARGV[1], ARGV[3]
	local v = held -- read by release_free.lua, with first
	if type(v) == 'string' then
		if string.sub(v, 1, #tok + 1) ~= tok .. ' ' then
			return 0
		end
		-- release_free.lua found waiters: first is the head of the line
		local t = now()
		local streak = string.match(v, '^%S+ %d+ (%d+)$') -- a local: gopher-lua's match returns nothing
		streak = tonumber(streak) or 0
		if ARGV[4] == '1' then
			streak = streakMax -- passed on in-process already: others first
		end
		local h, lease
		if streak < streakMax then
			h, lease = waiterOf(string.sub(tok, 1, string.find(tok, '.', 1, true) - 1), t, first)
		end
		if h then
			redis.call('lrem', Q, 1, h)
			streak = streak + 1
		else
			-- the head of the line, when it is a plain waiter still there
			local d, l, spec = string.match(redis.call('hget', W, first[1]) or '', '^(%d+) (%d+) (.*)$')
			if spec == 'p' and tonumber(d) > t then
				h, lease, streak = first[1], l, 0
				redis.call('lpop', Q)
			end
		end
		if h then
			redis.call('hdel', W, h) -- a plain waiter has no metadata
			local _, s = hold(h, lease, streak, block)
			notify(chanbase, h, s, 0)
			return 1
		end
	end
end
-- Every other case needs the full call (see core.lua).
if not W then
	return needFull
end
