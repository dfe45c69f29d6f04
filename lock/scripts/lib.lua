-- lib.lua: what the lock's scripts share. The lock prepends it to each of
-- them (a Redis script cannot include another).
--
-- Every script takes the keys of one lock name, all in one hash slot:
--
-- KEYS[1]  K, the lock. A plain mutex is a string: its hold token, a space,
--          its fencing token, and, when it was passed on within one client,
--          a space and how many times in a row (see promote). Every other lock is a hash with one field per
--          hold, named by the hold token (which contains a '.'; no other
--          field does), valued "<expiry ms> <fencing token> <x>[ <metadata>]"
--          where x is '-' for a mutex, the slot of a semaphore permit, 'r'
--          or 'w' for a read-write lock. Its other fields: k the kind ('s'
--          semaphore, 'rw' read-write lock, absent for a mutex), n the
--          permits of a semaphore, o the owner of a reentrant mutex, f the
--          fencing token its holds share, m its metadata. Each hold has its
--          own expiry, and the key expires with the last of them: a hold
--          never shortens another.
-- KEYS[2]  F, the fence counter: the last fencing token issued for the name.
-- KEYS[3]  Q, the waiters: a list of hold tokens, oldest first.
-- KEYS[4]  W, the waiters' requests: a hash from hold token to
--          "<deadline ms> <lease ms> <spec>", and from hold token .. ' m' to
--          its metadata. A waiter refreshes its deadline while it waits; one
--          whose deadline passed is gone, and skipped.
--
-- A spec says what a hold asks for: 'p' a plain mutex, 'h' a mutex with
-- metadata, 'o' .. owner a reentrant mutex, 's' .. permits a semaphore
-- permit, 'r' a read hold, 'w' a write hold.
--
-- Waiters get the lock in arrival order from whoever changes it (a release,
-- a cancelled wait, an acquisition that finds it free): the lock goes
-- straight to the waiter, which learns it from a message on its client's
-- channel, chanbase .. client id: "<hold token> <fencing token> <slot>". A
-- fencing token of 0 only wakes the waiter up (Redlock: no node can grant a
-- lock on its own).

local K, F, Q, W = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- str formats an integer exactly (tostring gives 14 digits on Redis < 7).
local function str(n)
	return string.format('%.0f', n)
end

-- now returns the Redis clock in milliseconds.
local function now()
	local t = redis.call('time')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- fence issues the next token of this name: the counter plus one. A missing
-- counter (first use, expired, evicted, lost in a failover or a restart) is
-- started one second ahead of Redis TIME in microseconds, and lives for that
-- second only: the clock catches up with it as it expires. So tokens grow
-- with every acquisition (fewer than a million a second) while the counter
-- lives, whatever the clock does (Redis expires it by the same clock), and
-- grow across a restart of the counter as long as the Redis clock has not
-- gone back by more than the time since the last acquisition. After a
-- failover that lost the counter's last increments, they grow if the
-- failover took more than a second and the servers' clocks agree within
-- that margin. Tokens stay below 2^53: Lua numbers hold them exactly.
local function fence()
	local token = redis.call('incr', F)
	if token == 1 then
		local t = redis.call('time')
		local s = (t[1] + 1) .. string.sub('00000' .. t[2], -6)
		redis.call('set', F, s, 'px', 1000)
		token = tonumber(s)
	end
	return token
end

-- kindof returns the kind of lock a spec asks for: 'm' mutex, 's'
-- semaphore, 'rw' read-write lock.
local function kindof(spec)
	local c = string.sub(spec, 1, 1)
	if c == 's' then
		return 's'
	elseif c == 'r' or c == 'w' then
		return 'rw'
	end
	return 'm'
end

-- load reads the lock at time t: its kind, its live holds (expired ones are
-- deleted, and the key with the last of them), their count n, the number of
-- write holds, and the slots in use. A plain mutex has its holder in plain.
local function load(t)
	local st = {n = 0, live = {}, writers = 0, used = {}}
	local v = redis.pcall('get', K)
	if type(v) == 'string' then
		local tok, token, streak = string.match(v, '^(%S+) (%d+) ?(%d*)$')
		st.kind, st.n = 'm', 1
		st.plain, st.token, st.streak = tok or v, token or '0', tonumber(streak) or 0
		return st
	end
	if not v then
		return st
	end
	-- a hash (GET failed with WRONGTYPE)
	local all = redis.call('hgetall', K)
	local meta = {}
	for i = 1, #all, 2 do
		local f, x = all[i], all[i + 1]
		if string.find(f, '.', 1, true) then
			local e, token, m, md = string.match(x, '^(%d+) (%d+) (%S+) ?(.*)$')
			e = tonumber(e)
			if e and e > t then
				st.live[f] = {e = e, token = token, x = m, md = md}
				st.n = st.n + 1
				st.used[m] = true
				if m == 'w' then
					st.writers = st.writers + 1
				end
			else
				redis.call('hdel', K, f)
			end
		else
			meta[f] = x
		end
	end
	if st.n == 0 then
		redis.call('del', K)
		return {n = 0, live = {}, writers = 0, used = {}}
	end
	st.kind, st.owner, st.token, st.md, st.permits = meta.k or 'm', meta.o, meta.f, meta.m, tonumber(meta.n)
	return st
end

-- expire makes the key of a hash lock live as long as its longest hold, and
-- deletes it when no hold is left.
local function expire(st, t)
	if st.n == 0 then
		redis.call('del', K)
		return
	end
	local last = 0
	for _, h in pairs(st.live) do
		if h.e > last then
			last = h.e
		end
	end
	redis.call('pexpire', K, math.max(last - t, 1))
end

-- room reports whether a hold of spec fits now, queue aside.
local function room(st, spec)
	if st.n == 0 then
		return true
	end
	local c = string.sub(spec, 1, 1)
	if c == 's' then
		return st.kind == 's' and st.n < st.permits
	elseif c == 'r' then
		return st.kind == 'rw' and st.writers == 0
	elseif c == 'o' then
		return st.owner == string.sub(spec, 2)
	end
	return false
end

-- mismatch reports whether the lock is held as another kind of lock than
-- spec asks for, or as a semaphore of another number of permits.
local function mismatch(st, spec)
	if st.n == 0 then
		return false
	end
	if st.kind ~= kindof(spec) then
		return true
	end
	return st.kind == 's' and st.permits ~= tonumber(string.sub(spec, 2))
end

-- add gives hold tok of spec the lock (room must be checked) for lease ms,
-- and returns its fencing token and slot. streak is for a plain mutex (see
-- promote).
local function add(st, tok, lease, spec, md, t, streak)
	local c = string.sub(spec, 1, 1)
	if c == 'p' then
		local token = fence()
		local v = tok .. ' ' .. str(token)
		if streak and streak > 0 then
			v = v .. ' ' .. streak
		end
		redis.call('set', K, v, 'px', lease)
		st.kind, st.n, st.plain, st.token, st.streak = 'm', 1, tok, str(token), streak or 0
		return token, 0
	end
	local new = st.n == 0
	local token
	if c == 'o' and not new then
		token = tonumber(st.token) -- a reentrant hold shares the owner's token
	else
		token = fence()
	end
	local x, slot = '-', 0
	if c == 's' then
		while st.used[tostring(slot)] do
			slot = slot + 1
		end
		x = tostring(slot)
	elseif c == 'r' or c == 'w' then
		x = c
	end
	local e = t + tonumber(lease)
	local v = str(e) .. ' ' .. str(token) .. ' ' .. x
	if md ~= '' then
		v = v .. ' ' .. md
	end
	local fields = {tok, v}
	if new then
		st.kind = kindof(spec)
		if st.kind == 's' then
			st.permits = tonumber(string.sub(spec, 2))
			table.insert(fields, 'k')
			table.insert(fields, 's')
			table.insert(fields, 'n')
			table.insert(fields, string.sub(spec, 2))
		elseif st.kind == 'rw' then
			table.insert(fields, 'k')
			table.insert(fields, 'rw')
		else
			st.token = str(token)
			table.insert(fields, 'f')
			table.insert(fields, st.token)
			if c == 'o' then
				st.owner = string.sub(spec, 2)
				table.insert(fields, 'o')
				table.insert(fields, st.owner)
			end
			if md ~= '' then
				table.insert(fields, 'm')
				table.insert(fields, md)
			end
		end
	end
	redis.call('hset', K, unpack(fields))
	st.live[tok] = {e = e, token = str(token), x = x, md = md}
	st.n = st.n + 1
	st.used[x] = true
	if x == 'w' then
		st.writers = st.writers + 1
	end
	expire(st, t)
	return token, slot
end

-- head returns the first waiter still there: its hold token, lease and
-- spec. Waiters that are gone are dropped on the way.
local function head(t)
	while true do
		local tok = redis.call('lindex', Q, 0)
		if not tok then
			return nil
		end
		local e = redis.call('hget', W, tok)
		if e then
			local d, lease, spec = string.match(e, '^(%d+) (%d+) (.*)$')
			if tonumber(d) > t then
				return tok, lease, spec
			end
		end
		redis.call('lpop', Q)
		redis.call('hdel', W, tok, tok .. ' m')
	end
end

-- dequeue takes tok out of the waiters.
local function dequeue(tok)
	redis.call('lrem', Q, 1, tok)
	redis.call('hdel', W, tok, tok .. ' m')
	if redis.call('exists', Q) == 0 then
		redis.call('del', W)
	end
end

-- enqueue adds tok at the end of the waiters, or, if it waits already,
-- refreshes its deadline: ttl ms from t.
local function enqueue(tok, t, ttl, lease, spec, md)
	if redis.call('hset', W, tok, str(t + ttl) .. ' ' .. lease .. ' ' .. spec) == 1 then
		redis.call('rpush', Q, tok)
	end
	if md ~= '' then
		redis.call('hset', W, tok .. ' m', md)
	end
	for _, k in ipairs({Q, W}) do
		if redis.call('pttl', k) < ttl then
			redis.call('pexpire', k, ttl)
		end
	end
end

-- notify tells the client of waiter tok that it got the lock (or, with a
-- token of 0, to try again).
local function notify(chanbase, tok, token, slot)
	local id = string.sub(tok, 1, string.find(tok, '.', 1, true) - 1)
	redis.call('publish', chanbase .. id, tok .. ' ' .. str(token) .. ' ' .. slot)
end

-- full reports whether no waiter of any spec can get the lock now.
local function full(st)
	if st.n == 0 then
		return false
	elseif st.kind == 's' then
		return st.n >= st.permits
	elseif st.kind == 'rw' then
		return st.writers > 0
	end
	return true -- a mutex: its reentrant owner does not wait in line
end

-- streakMax bounds how many times in a row a plain mutex goes to a waiter of
-- the client that releases it, ahead of older waiters of other clients.
local streakMax = 8

-- waiterOf returns the first waiter of client id for a plain mutex, still
-- there, among the first 64 of the line.
local function waiterOf(id, t)
	for _, tok in ipairs(redis.call('lrange', Q, 0, 63)) do
		if string.sub(tok, 1, #id + 1) == id .. '.' then
			local e = redis.call('hget', W, tok)
			local d, lease, spec = string.match(e or '', '^(%d+) (%d+) (.*)$')
			if spec == 'p' and tonumber(d) > t then
				return tok, lease, spec
			end
		end
	end
	return nil
end

-- promote gives the lock to the waiters at the head of the line, in order,
-- while they fit, and tells them. If waiter me is among them it is not
-- told: promote returns its fencing token and slot.
--
-- A plain mutex released by client from goes to that client's first waiter,
-- if it has one, up to streakMax times in a row; then to the head of the
-- line. Passing the lock within the process that holds it is several times
-- quicker than waking another process (the releasing process runs; another
-- may have to be scheduled), and the bound keeps the line fair: a waiter
-- waits for at most streakMax holds of each client ahead of it.
local function promote(st, t, chanbase, me, from)
	local mine, myslot
	while not full(st) do
		local h, lease, spec, streak
		if from and (st.streak or 0) < streakMax then
			h, lease, spec = waiterOf(from, t)
			streak = (st.streak or 0) + 1
		end
		if h then
			redis.call('lrem', Q, 1, h)
		else
			h, lease, spec = head(t)
			if not h or mismatch(st, spec) or not room(st, spec) then
				break
			end
			redis.call('lpop', Q)
			streak = 0
		end
		local md = redis.call('hget', W, h .. ' m') or ''
		redis.call('hdel', W, h, h .. ' m')
		local token, slot = add(st, h, lease, spec, md, t, streak)
		if h == me then
			mine, myslot = token, slot
		else
			notify(chanbase, h, token, slot)
		end
		from = nil
	end
	return mine, myslot
end

-- serve gives a lock that changed to the waiters that now fit, in order
-- (from: the client that released a plain mutex, see promote); without fifo
-- (Redlock) it wakes the first waiter of a free lock instead. t may be nil:
-- the time is read only if someone waits.
local function serve(st, t, fifo, chanbase, from)
	if redis.call('exists', Q) == 0 then
		return
	end
	t = t or now()
	if fifo then
		promote(st, t, chanbase, nil, from)
	elseif st.n == 0 then
		local h = head(t)
		if h then
			dequeue(h)
			notify(chanbase, h, 0, 0)
		end
	end
end

-- release drops hold tok, then serves the waiters. It returns 0 when tok
-- held nothing, 2 when other holds remain, 1 when the lock is free or went
-- to a waiter.
local function release(st, tok, t, fifo, chanbase)
	local from
	if st.plain and st.plain == tok then
		redis.call('del', K)
		st.n, st.plain, st.kind = 0, nil, nil
		from = string.sub(tok, 1, string.find(tok, '.', 1, true) - 1)
	elseif st.live[tok] then
		local h = st.live[tok]
		redis.call('hdel', K, tok)
		st.live[tok] = nil
		st.n = st.n - 1
		st.used[h.x] = nil
		if h.x == 'w' then
			st.writers = st.writers - 1
		end
		expire(st, t)
	else
		return 0
	end
	local r = 1
	if st.n > 0 then
		r = 2
	end
	serve(st, t, fifo, chanbase, from)
	return r
end

-- describe lists the lock for Client.Inspect: kind ('' when free),
-- permits, live waiters, ms until the key expires, the number of holds,
-- then for each hold its hold token, fencing token, ms left, slot or mode,
-- owner and metadata.
local function describe(st, t)
	local waiters = 0
	for _, tok in ipairs(redis.call('lrange', Q, 0, -1)) do
		local e = redis.call('hget', W, tok)
		if e and tonumber(string.match(e, '^(%d+)')) > t then
			waiters = waiters + 1
		end
	end
	local out = {st.kind or '', tostring(st.permits or 0), tostring(waiters),
		tostring(math.max(redis.call('pttl', K), 0)), tostring(st.n)}
	if st.plain then
		for _, v in ipairs({st.plain, st.token, out[4], '-', '', ''}) do
			table.insert(out, v)
		end
		return out
	end
	for tok, h in pairs(st.live) do
		for _, v in ipairs({tok, h.token, str(h.e - t), h.x, st.owner or '', h.md}) do
			table.insert(out, v)
		end
	end
	return out
end
