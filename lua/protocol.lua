-- protocol.lua: which version of the protocol (PROTOCOL.md) this library
-- speaks, so a client in another language can find, among the libraries a
-- server holds (FUNCTION LIST LIBRARYNAME delayq_), one it can call: the
-- library's name changes with every release, the protocol's major version
-- only when a client written against it would break.
-- No keys, no arguments. Returns {major, minor}: a client of major M calls a
-- library whose major is M, and any minor (a higher minor only adds).
-- Reads nothing, writes nothing.
return {1, 0}
