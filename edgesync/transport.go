package edgesync

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// Transport carries encoded placement messages between edges. It is what
// a module in the Caddy namespace http.prefix_cache.sync provides to the
// policy; edgesync/redis is one.
type Transport interface {
	// Publish hands an encoded message to the transport for every other
	// edge. It never blocks and never does I/O on the caller's goroutine:
	// when the bounded buffer is full, or the transport is not connected,
	// it drops the message, counts it, and returns false. The transport
	// retains msg only until Publish returns (it copies it).
	Publish(msg []byte) bool

	// Subscribe registers fn to receive every message published on the
	// channel by any edge, its own echoes included, until cancel is
	// called. fn is called on the transport's own goroutine, one message
	// at a time, and the subscribers of one transport one after another:
	// fn must return quickly (decode and record, microseconds), and must
	// neither block nor keep msg, which is only valid during the call.
	// Whatever arrives is passed on as it came, except messages larger
	// than MaxMessageSize: fn validates it (Decode). cancel may be called
	// more than once and from within fn; a call of fn already under way
	// when cancel returns may still finish.
	Subscribe(fn func(msg []byte)) (cancel func())

	// Status reports counters and state for metrics and the admin API. It
	// never contains secrets: no password, no URL credentials.
	Status() Status
}

// Status is a transport's state and counters since it was created (a
// transport kept across config reloads keeps counting).
type Status struct {
	// Transport names the kind, such as "redis".
	Transport string `json:"transport"`
	// Endpoint is where the transport connects, without credentials, such
	// as "redis://10.0.0.5:6379/0".
	Endpoint string `json:"endpoint"`
	// Channel is the channel or subject messages travel on.
	Channel string `json:"channel"`

	// Connected is true while messages can flow both ways.
	Connected bool `json:"connected"`
	// Since is when Connected last changed (or the transport started).
	Since time.Time `json:"since"`
	// LastError is why the transport last disconnected or failed to
	// publish, free of credentials; empty if it never did.
	LastError string `json:"last_error,omitempty"`

	// Published counts messages the engine accepted.
	Published uint64 `json:"published"`
	// DroppedFull counts messages Publish refused because the buffer was
	// full (the engine is slow or the publisher falls behind).
	DroppedFull uint64 `json:"dropped_full"`
	// DroppedDisconnected counts messages Publish refused while
	// disconnected.
	DroppedDisconnected uint64 `json:"dropped_disconnected"`
	// Failed counts queued messages lost because publishing them failed.
	Failed uint64 `json:"failed"`
	// Received counts messages delivered to subscribers, echoes included.
	Received uint64 `json:"received"`
	// Oversized counts messages larger than MaxMessageSize, which no edge
	// sends: refused by Publish, or dropped on receipt undelivered.
	Oversized uint64 `json:"oversized"`
	// Reconnects counts connections made after the first.
	Reconnects uint64 `json:"reconnects"`

	// Queued is the number of messages waiting to be published, of
	// Buffer at most.
	Queued int `json:"queued"`
	Buffer int `json:"buffer"`
	// Subscribers is the number of registered subscribers.
	Subscribers int `json:"subscribers"`
}

// Dropped is every message that did not reach the engine: refused by
// Publish, or lost after it.
func (s Status) Dropped() uint64 {
	return s.DroppedFull + s.DroppedDisconnected + s.Failed
}

// NewOrigin returns a random nonzero edge ID for Message.Origin: one per
// process, so an edge recognises its own echoes.
func NewOrigin() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
		if o := binary.LittleEndian.Uint64(b[:]); o != 0 {
			return o
		}
	}
}
