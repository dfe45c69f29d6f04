-- acquire.lua: take the lock if it is free, or add a hold if the same
-- reentrant owner holds it, and issue a fencing token.
--
-- KEYS[1]  the lock. A plain lock is a string: the hold token, then, once
--          someone waits, '*' and the ids of the waiting clients. A reentrant
--          lock, or one with metadata, is a hash: f = fencing token, o =
--          reentrant owner, n = extra holds, w = someone waits, m = metadata,
--          and a field named by each hold token. Releasing an awaited lock
--          publishes on the channel named like the key.
-- KEYS[2]  fence counter: the last token issued for this name.
-- ARGV[1]  hold token, unique per acquisition: the client id, '.', a
--          sequence number (never contains '*')
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  waiter mark: '0' never, '1' if taken, '2' always (default '0')
-- ARGV[4]  '' for a plain lock, '-' for a hash lock without reentrancy,
--          'r:' followed by the owner for a reentrant lock (default '')
-- ARGV[5]  metadata (hash locks only; may be absent)
--
-- Returns the fencing token (> 0) when acquired, also when this hold token
-- already holds the lock (a retried acquisition, or a handoff); when taken,
-- -1 - the holder's remaining lease in ms.

local tok, lease = ARGV[1], ARGV[2]
local mark, kind = ARGV[3] or '0', ARGV[4] or ''

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
	local token = redis.call('incr', KEYS[2])
	if token == 1 then
		local now = redis.call('time')
		-- a string: Redis < 7 formats Lua numbers with 14 digits
		local s = (now[1] + 1) .. string.sub('00000' .. now[2], -6)
		redis.call('set', KEYS[2], s, 'px', 1000)
		token = tonumber(s)
	end
	return token
end

local function taken()
	local pttl = redis.call('pttl', KEYS[1])
	return -1 - math.max(pttl, 0)
end

-- id of the client: the hold token up to its '.'
local function id()
	return string.sub(tok, 1, string.find(tok, '.', 1, true))
end

if kind == '' then
	local v = tok
	if mark == '2' then
		v = v .. '*' .. id()
	end
	if redis.call('set', KEYS[1], v, 'nx', 'px', lease) then
		return fence()
	end
elseif redis.call('exists', KEYS[1]) == 0 then
	local token = fence()
	local fields = {'f', string.format('%.0f', token), tok, '1'}
	if kind ~= '-' then
		fields[#fields + 1] = 'o'
		fields[#fields + 1] = kind
	end
	if mark == '2' then
		fields[#fields + 1] = 'w'
		fields[#fields + 1] = '1'
	end
	if ARGV[5] and ARGV[5] ~= '' then
		fields[#fields + 1] = 'm'
		fields[#fields + 1] = ARGV[5]
	end
	redis.call('hset', KEYS[1], unpack(fields))
	redis.call('pexpire', KEYS[1], lease)
	return token
end

-- taken, or already held by this very hold token
local v = redis.pcall('get', KEYS[1])
if type(v) == 'string' then
	-- a plain lock
	if v == tok or string.sub(v, 1, #tok + 1) == tok .. '*' then
		-- ours: the reply of an earlier attempt was lost, or a releasing
		-- client handed the lock over
		return tonumber(redis.call('get', KEYS[2])) or fence()
	end
	if mark ~= '0' then
		local me = id()
		local star = string.find(v, '*', 1, true)
		if not star then
			redis.call('append', KEYS[1], '*' .. me)
		elseif not string.find(v, me, star, true) then
			redis.call('append', KEYS[1], me)
		end
	end
	return taken()
end

-- a hash lock (GET failed with WRONGTYPE)
if redis.call('hexists', KEYS[1], tok) == 1 then
	return tonumber(redis.call('hget', KEYS[1], 'f'))
end
if kind ~= '' and kind ~= '-' and redis.call('hget', KEYS[1], 'o') == kind then
	redis.call('hset', KEYS[1], tok, '1')
	redis.call('hincrby', KEYS[1], 'n', 1)
	if redis.call('pttl', KEYS[1]) < tonumber(lease) then
		redis.call('pexpire', KEYS[1], lease)
	end
	return tonumber(redis.call('hget', KEYS[1], 'f'))
end
if mark ~= '0' then
	redis.call('hset', KEYS[1], 'w', '1')
end
return taken()
