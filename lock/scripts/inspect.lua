-- inspect.lua: describe a lock, whoever holds it. (lib.lua comes first: it
-- describes the keys and the reply.)
--
-- KEYS     K, F, Q, W (see lib.lua)
--
-- Returns describe's array of strings.

local t = now()
return describe(load(t), t)
