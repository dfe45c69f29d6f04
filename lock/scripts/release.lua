-- release.lua: drop one hold. When it was the last one, either hand the lock
-- over to another hold token of the same client, or delete it and, if
-- someone waits, publish on the channel named like the lock key.
--
-- KEYS[1]  the lock (see acquire.lua)
-- KEYS[2]  fence counter (see acquire.lua); only with a handoff
-- ARGV[1]  hold token
-- ARGV[2]  '' for a plain (string) lock, 'h' for a hash lock (default '')
-- ARGV[3]  hold token of a waiter of this client to hand the lock to (may
--          be absent, as may all that follow)
-- ARGV[4]  its lease in milliseconds
-- ARGV[5]  '1' if more of this client's waiters wait behind it, else ''
--
-- Returns 1 released (the lock is free), 2 this hold released but the
-- reentrant owner still holds others, the new holder's fencing token (> 2)
-- when handed over, 0 not held (expired, taken over, or already released: a
-- retried release changes nothing).
--
-- A handoff happens only when no other client waits: the lock then goes to
-- the next waiter without ever being free. Other clients' waiters get the
-- lock through the published message, like everyone else.
local tok = ARGV[1]
if (ARGV[2] or '') == '' then
	-- pcall: someone else's hash lock in its place is simply "not held"
	local v = redis.pcall('get', KEYS[1])
	if v == tok then
		redis.call('del', KEYS[1])
		return 1
	end
	local n = #tok
	if type(v) ~= 'string' or string.sub(v, 1, n + 1) ~= tok .. '*' then
		return 0
	end
	if ARGV[3] then
		local id = string.sub(tok, 1, string.find(tok, '.', 1, true))
		if string.sub(v, n + 2) == id then
			local next = ARGV[3]
			if ARGV[5] == '1' then
				next = next .. '*' .. id
			end
			redis.call('set', KEYS[1], next, 'px', ARGV[4])
			-- the next fencing token, as in acquire.lua
			local token = redis.call('incr', KEYS[2])
			if token == 1 then
				local now = redis.call('time')
				local s = (now[1] + 1) .. string.sub('00000' .. now[2], -6)
				redis.call('set', KEYS[2], s, 'px', 1000)
				token = tonumber(s)
			end
			return token
		end
	end
	redis.call('del', KEYS[1])
	redis.call('publish', KEYS[1], '')
	return 1
end
local v = redis.pcall('hmget', KEYS[1], tok, 'n', 'w')
if v['err'] or not v[1] then
	return 0
end
local n = tonumber(v[2])
if n and n > 0 then
	redis.call('hdel', KEYS[1], tok)
	redis.call('hincrby', KEYS[1], 'n', -1)
	return 2
end
redis.call('del', KEYS[1])
if v[3] then
	redis.call('publish', KEYS[1], '')
end
return 1
