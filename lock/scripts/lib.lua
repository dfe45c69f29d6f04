-- lib.lua: what the lock's scripts share beyond core.lua and
-- contended.lua, which come before it (core.lua says in which order, and
-- describes the keys).

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

-- semspec returns the permits of a semaphore spec and how many of them the
-- hold takes: 's' .. permits for one, 's' .. permits .. 'x' .. n for n.
local function semspec(spec)
	local permits, n = string.match(spec, '^s(%d+)x?(%d*)$')
	return tonumber(permits), tonumber(n) or 1
end

-- take marks the slots of a semaphore hold, x ("<slot>[,<slot>...]"),
-- used (by one more or, with by -1, one less hold); other holds mark their
-- mode or '-'. It counts the permits taken.
local function take(st, x, by)
	local v = by > 0 or nil
	if not string.find(x, ',', 1, true) then
		st.used[x] = v
		st.taken = st.taken + by
		return
	end
	for s in string.gmatch(x, '%d+') do
		st.used[s] = v
		st.taken = st.taken + by
	end
end

-- load reads the lock at time t: its kind, its live holds (expired ones are
-- deleted, and the key with the last of them), their count n, the number of
-- write holds, the slots in use and the permits they make, taken. A plain
-- mutex has its holder in plain.
local function load(t)
	local st = {n = 0, live = {}, writers = 0, used = {}, taken = 0}
	local v = redis.pcall('get', K)
	if type(v) == 'string' then
		local tok, token, streak = string.match(v, '^(%S+) (%d+) ?(%d*)$')
		st.kind, st.n = 'm', 1
		st.plain, st.token, st.streak = tok or v, token or '0', tonumber(streak) or 0
		st.v = v
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
				take(st, m, 1)
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
		return {n = 0, live = {}, writers = 0, used = {}, taken = 0}
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
		local _, n = semspec(spec)
		return st.kind == 's' and st.taken + n <= st.permits
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
	return st.kind == 's' and st.permits ~= semspec(spec)
end

-- add gives hold tok of spec the lock (room must be checked) for lease ms,
-- and returns its fencing token and slot: for a semaphore hold, its slots,
-- the lowest free ones, as "<slot>[,<slot>...]"; 0 for others. One token
-- for all the slots of a hold: it is above every earlier hold's, so it
-- fences each of them. streak and n (the tokens it reserves, see block in
-- core.lua) are for a plain mutex (see promote).
local function add(st, tok, lease, spec, md, t, streak, n)
	local c = string.sub(spec, 1, 1)
	if st.stale then
		-- the released plain mutex, still in K: a plain hold overwrites it
		st.stale = nil
		if c ~= 'p' then
			redis.call('del', K)
		end
	end
	if c == 'p' then
		local token, s = hold(tok, lease, streak, n)
		st.kind, st.n, st.plain, st.token, st.streak = 'm', 1, tok, s, streak or 0
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
		local _, want = semspec(spec)
		local got, i = {}, 0
		while #got < want do
			if not st.used[tostring(i)] then
				table.insert(got, tostring(i))
			end
			i = i + 1
		end
		x = table.concat(got, ',')
		slot = x
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
			st.permits = semspec(spec)
			table.insert(fields, 'k')
			table.insert(fields, 's')
			table.insert(fields, 'n')
			table.insert(fields, str(st.permits))
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
	st.taken = st.taken or 0
	take(st, x, 1)
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

-- full reports whether no waiter of any spec can get the lock now.
local function full(st)
	if st.n == 0 then
		return false
	elseif st.kind == 's' then
		return st.taken >= st.permits
	elseif st.kind == 'rw' then
		return st.writers > 0
	end
	return true -- a mutex: its reentrant owner does not wait in line
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
local function promote(st, t, chanbase, me, from, first)
	local mine, myslot
	while not full(st) do
		local h, lease, spec, streak
		if from and (st.streak or 0) < streakMax then
			h, lease, spec = waiterOf(from, t, first)
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
		local md = ''
		if spec == 'p' then
			redis.call('hdel', W, h) -- a plain mutex has no metadata (that is 'h')
		else
			md = redis.call('hget', W, h .. ' m') or ''
			redis.call('hdel', W, h, h .. ' m')
		end
		local token, slot = add(st, h, lease, spec, md, t, streak, block)
		if h == me then
			mine, myslot = token, slot
		elseif spec == 'p' then
			notify(chanbase, h, st.token, slot) -- add formatted it
		else
			notify(chanbase, h, str(token), slot)
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
	local first
	if fifo and from then
		-- whether anyone waits, and where the client's first waiter is
		first = redis.call('lrange', Q, 0, 7)
		if #first == 0 then
			return
		end
	elseif redis.call('exists', Q) == 0 then
		return
	end
	t = t or now()
	if fifo then
		promote(st, t, chanbase, nil, from, first)
	elseif st.n == 0 then
		local h = head(t)
		if h then
			dequeue(h)
			notify(chanbase, h, '0', 0)
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
		take(st, h.x, -1)
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
