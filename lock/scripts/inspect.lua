-- inspect.lua: describe a lock, whoever holds it. (core.lua and lib.lua
-- come first: they describe the keys and the reply.)
--
-- KEYS     K, F, Q, W (see core.lua)
--
-- Returns describe's array of strings.

local t = now()
return describe(load(t), t)
