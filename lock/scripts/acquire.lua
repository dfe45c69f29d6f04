-- acquire.lua: take a lock, or wait in line for it. (core.lua comes first:
-- it describes the keys.)
--
-- KEYS     K, F, Q, W (see core.lua)
-- ARGV[1]  hold token, unique per acquisition: the client id, '.', a
--          sequence number
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  spec (see core.lua; default 'p': a plain mutex)
-- ARGV[4]  '0' (default) just try; '1' wait in line when the lock is taken;
--          '2' the same, from a waiter that may have been given the lock
-- ARGV[5]  '0' for Redlock: no order, no grants, a release wakes the first
--          waiter; default '1'
-- ARGV[6]  how long a waiter's place lasts unless refreshed, in ms
-- ARGV[7]  chanbase: the channel of a client is chanbase .. its id
-- ARGV[8]  metadata (default '')
--
-- Returns, for a semaphore spec and when ARGV[4] is '2', an array of
-- strings: the fencing token, the slots ("<slot>[,<slot>...]" for a
-- semaphore, else '0'), and '1' if this hold token held the
-- lock before this call (a waiter given the lock) else '0'; for others an
-- integer: the fencing token. The token is
-- > 0 when acquired, also when this hold token already holds the lock (a
-- retried attempt, or a waiter that was given the lock); 0 when the name is
-- held by another kind of lock (or a semaphore of other permits); when
-- taken, -1 - the ms until the first hold ends. When ARGV[4] is '2' and the
-- lock is taken, a fourth string bounds the tokens issued so far: a grant
-- with a token not above it was made before this call, which found this
-- hold token not holding the lock, so that grant is gone.
--
-- A free lock goes to the waiters first: an acquisition does not overtake
-- them, unless it is a reentrant owner's, which already holds the lock.

local tok, lease, spec = ARGV[1], ARGV[2], ARGV[3] or 'p'

-- (acquire_free.lua took the free plain mutex, acquire_fast.lua the plainly
-- held one)
local how = ARGV[4] or '0'
local wait, fifo = how ~= '0', ARGV[5] ~= '0'
local ttl, chanbase, md = tonumber(ARGV[6]), ARGV[7], ARGV[8] or ''
local strs = string.sub(spec, 1, 1) == 's' or how == '2'
local n = (wait and fifo) and block or 1 -- tokens a plain hold reserves

local function reply(token, slot, held)
	if strs then
		return {str(token), tostring(slot or 0), held and '1' or '0'}
	end
	return token
end

local t = now()
local st = load(t)
if st.plain and st.plain == tok then
	dequeue(tok)
	return reply(tonumber(st.token), 0, true)
end
local mine = st.live[tok]
if mine then
	dequeue(tok)
	return reply(tonumber(mine.token), st.kind == 's' and mine.x or 0, true)
end
if mismatch(st, spec) then
	return reply(0)
end
if room(st, spec) then
	local reentry = string.sub(spec, 1, 1) == 'o' and st.n > 0
	if reentry or not fifo then
		local token, slot = add(st, tok, lease, spec, md, t, nil, n)
		if wait then
			dequeue(tok)
		end
		return reply(token, slot)
	end
	-- the waiters first, in order; this hold may be one of them
	local token, slot = promote(st, t, chanbase, tok)
	if token then
		return reply(token, slot)
	end
	if not head(t) and room(st, spec) then
		token, slot = add(st, tok, lease, spec, md, t, nil, n)
		return reply(token, slot)
	end
end
if wait then
	enqueue(tok, t, ttl, lease, spec, md)
	if st.v then
		mark(st.v) -- a plain mutex: its release must read the line
	end
end
local first = redis.call('pttl', K)
for _, h in pairs(st.live) do
	first = math.min(first, h.e - t)
end
local r = reply(-1 - math.max(first, 0))
if how == '2' then
	-- the last token issued; with no counter, one below the first that the
	-- next one will issue (see fence: the tokens of the last one were below
	-- that)
	local issued = redis.call('get', F)
	if not issued then
		local c = redis.call('time')
		issued = str(tonumber((c[1] + 1) .. string.sub('00000' .. c[2], -6)) - 1)
	end
	table.insert(r, issued)
end
return r
