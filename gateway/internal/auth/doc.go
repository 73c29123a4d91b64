// Package auth holds the API keys of the inference API and each key's limits. A Store reads a
// key file (YAML: each key's name, its SHA-256 or the key itself, the models it may use, its
// limits; docs/security.md), looks a presented key up in constant time, and is reloaded
// without a restart: a file that does not parse is refused and the keys in use stay. A Key's
// limits are a token bucket of requests per second (kept as a theoretical arrival time,
// lock-free) and a bound on its requests in flight; the state of a key's limits and its
// request counters live by its name across reloads. Keys themselves are never kept: only
// their SHA-256. It imports nothing of this module.
package auth
