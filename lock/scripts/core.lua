-- core.lua: what every script of the lock starts with: its keys, and the
-- few functions that every case needs. A Redis script cannot include
-- another, so the lock makes each script of, in order: core.lua; the
-- script's uncontended case if it has one (acquire_free.lua,
-- release_free.lua); contended.lua, the functions of the contended plain
-- mutex; the script's fast path if it has one (acquire_fast.lua,
-- release_fast.lua); lib.lua, the functions of every other lock; and the
-- script itself. Each function a script defines costs every run of it,
-- called or not (lib.lua's cost as much as five Redis calls), so each case
-- returns before the definitions it does not need.
--
-- Every script takes the keys of one lock name, all in one hash slot:
--
-- KEYS[1]  K, the lock. A plain mutex is a string: its hold token, a space,
--          its fencing token, and, when it was passed on within one client,
--          a space and how many times in a row (see promote in lib.lua).
--          Every other lock is a hash with one field per hold, named by
--          the hold token (which contains a '.'; no other field does),
--          valued "<expiry ms> <fencing token> <x>[ <metadata>]"
--          where x is '-' for a mutex, the slots of a semaphore hold
--          ("<slot>[,<slot>...]", one per permit it holds), 'r' or 'w'
--          for a read-write lock. Its other fields: k the kind ('s'
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
-- permit, 's' .. permits .. 'x' .. n a hold of n permits at once, 'r' a
-- read hold, 'w' a write hold.
--
-- Waiters get the lock in arrival order from whoever changes it (a release,
-- a cancelled wait, an acquisition that finds it free): the lock goes
-- straight to the waiter, which learns it from a message on its client's
-- channel, chanbase .. client id: "<hold token> <fencing token> <slots>". A
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

-- block is how many tokens a plain mutex hold reserves when it comes from
-- Lock on one Redis (a waiter, or an attempt that would have waited): its
-- own, and those of the holds its client passes it on to in-process without
-- Redis (see cohort.go, which counts on exactly this rule).
local block = 17
