// Package edgesync is what several Caddy edges in front of one fleet share:
// the wire formats of a placement message (an edge chose an upstream for a
// prompt's chain of chunk hashes), a load report (LoadReport) and a
// command (Command: an operator's flush or forget, a joining edge's
// catch-up request), and the Transport interface that carries them
// between edges. Transports are Caddy modules in the
// namespace http.prefix_cache.sync (edgesync/redis is the first); this package
// imports neither Caddy nor net/http.
//
// # Threat model
//
// Anyone who can publish on the transport's channel can send any bytes to
// every edge. What such a publisher can do is bounded by design:
//
//   - Decode validates every message against the receiver's Limits before
//     it changes anything: magic, version, kind, upstream length and bytes,
//     hash count and total length. A malformed message is an error, never a
//     panic, and costs the receiver no memory beyond the message itself and
//     the reused Message.
//   - A valid message can at worst mis-route: it names an upstream and some
//     hashes. The receiver applies it to its own index, which is bounded in
//     entries and bytes whatever it is fed, and only for upstreams it has
//     configured itself.
//   - Transports never run on the request path: Publish never blocks and
//     never does I/O on the caller's goroutine, and messages are applied on
//     the transport's own goroutine.
//
// Keeping strangers off the channel is the engine's job (Redis ACLs,
// TLS, a private network), not this package's: its formats carry no
// signature. The policy appends one with hash_key (caddymodule), and
// bounds what an unsigned message can do (docs/sync.md).
package edgesync
