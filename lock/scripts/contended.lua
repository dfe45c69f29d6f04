-- contended.lua: the functions that every case but the uncontended ones
-- needs (str, now, fence), and those of the common contended case, a plain
-- mutex handed to its waiters (see core.lua, which comes before, and the
-- fast paths that come after: acquire_fast.lua, release_fast.lua). The
-- uncontended cases (acquire_free.lua, release_free.lua) run before it and
-- do not pay for defining them.

-- str formats an integer exactly (tostring gives 14 digits on Redis < 7).
local function str(n)
	return string.format('%.0f', n)
end

-- now returns the Redis clock in milliseconds.
local function now()
	local t = redis.call('time')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- fence issues the next n tokens of this name (default 1): the counter
-- plus one to the counter plus n, and returns the first. A missing counter
-- (first use, expired, evicted, lost in a failover or a restart) is started
-- one second ahead of Redis TIME in microseconds, and lives for that second
-- only: the clock catches up with it as it expires. So tokens grow with
-- every acquisition (fewer than a million tokens a second) while the counter
-- lives, whatever the clock does (Redis expires it by the same clock), and
-- grow across a restart of the counter as long as the Redis clock has not
-- gone back by more than the time since the last acquisition. After a
-- failover that lost the counter's last increments, they grow if the
-- failover took more than a second and the servers' clocks agree within
-- that margin. Tokens stay below 2^53: Lua numbers hold them exactly.
-- acquire_free.lua repeats this inline (it runs before any function is
-- defined): a change here goes there too.
local function fence(n)
	n = n or 1
	local token = redis.call('incrby', F, n)
	if token == n then
		local t = redis.call('time')
		local s = (t[1] + 1) .. string.sub('00000' .. t[2], -6)
		token = tonumber(s) + n - 1
		redis.call('set', F, str(token), 'px', 1000)
	end
	return token - n + 1
end

-- hold sets K to the plain hold tok for lease ms, with the next fencing
-- token, or the first of the next n (streak: see promote in lib.lua), and
-- returns the token and its string. The value has its third field, the
-- streak, even when it is 0: the mark that someone may wait (see mark).
local function hold(tok, lease, streak, n)
	local token = fence(n)
	local s = str(token)
	redis.call('set', K, tok .. ' ' .. s .. ' ' .. (streak or 0), 'px', lease)
	return token, s
end

-- mark gives the plain mutex whose value is v a third field (a streak of 0)
-- if it has none: the mark that someone may wait in line. A plain mutex
-- without it has nobody waiting, so its release (release_free.lua) deletes
-- it without reading the line. Only acquire_free.lua writes one without
-- it, when nobody waits; whoever adds a waiter marks it.
local function mark(v)
	local i = string.find(v, ' ', 1, true)
	if not (i and string.find(v, ' ', i + 1, true)) then
		redis.call('append', K, ' 0')
	end
end

-- enqueue adds tok at the end of the waiters, or, if it waits already,
-- refreshes its deadline: ttl ms from t.
--
-- The keys of the line outlive every deadline, and Q outlives W: a new Q,
-- and both keys when W has less than ttl left, get twice ttl. So one PTTL
-- (of W) is all most calls (one per contended acquisition) spend on it.
local function enqueue(tok, t, ttl, lease, spec, md)
	if redis.call('hset', W, tok, str(t + ttl) .. ' ' .. lease .. ' ' .. spec) == 1
		and redis.call('rpush', Q, tok) == 1 then
		redis.call('pexpire', Q, 2 * ttl)
	end
	if md ~= '' then
		redis.call('hset', W, tok .. ' m', md)
	end
	if redis.call('pttl', W) < ttl then
		redis.call('pexpire', W, 2 * ttl)
		redis.call('pexpire', Q, 2 * ttl)
	end
end

-- notify tells the client of waiter tok that it got the lock (or, with a
-- token of '0', to try again). token is a string (see str).
local function notify(chanbase, tok, token, slot)
	local id = string.sub(tok, 1, string.find(tok, '.', 1, true) - 1)
	redis.call('publish', chanbase .. id, tok .. ' ' .. token .. ' ' .. slot)
end

-- streakMax bounds how many times in a row a plain mutex goes to a waiter of
-- the client that releases it, ahead of older waiters of other clients.
local streakMax = 8

-- waiterOf returns the first waiter of client id for a plain mutex, still
-- there, among the first 64 of the line. It reads the first 8 before the
-- others: the client's first waiter is usually among them (a line of 8
-- clients' waiters, or of one client's), and every entry read costs.
-- first, when given, holds the first 8 (see serve).
local function waiterOf(id, t, first)
	local pre = id .. '.'
	local function find(toks)
		for _, tok in ipairs(toks) do
			if string.sub(tok, 1, #pre) == pre then
				local e = redis.call('hget', W, tok)
				local d, lease, spec = string.match(e or '', '^(%d+) (%d+) (.*)$')
				if spec == 'p' and tonumber(d) > t then
					return tok, lease, spec
				end
			end
		end
	end
	first = first or redis.call('lrange', Q, 0, 7)
	local h, lease, spec = find(first)
	if h or #first < 8 then
		return h, lease, spec
	end
	return find(redis.call('lrange', Q, 8, 63))
end
