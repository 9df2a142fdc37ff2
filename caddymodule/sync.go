package caddymodule

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/fleet"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// Several edges share what they learn, and their load (tierload.go),
// through a transport module of the http.prefix_cache.sync namespace
// (edgesync/redis). Each edge publishes what it records: at selection the
// chunk hashes and the chosen upstream's Dial (Placed), and at the
// request's end, when the upstream answered 2xx, the same again
// (Confirmed). Every edge applies what the others publish
// to its own index, Placed as a Record (on probation) and Confirmed as a
// Confirm, so each routes as if it had seen every request. None of it is
// on the request path: Publish only queues (or drops) a copy, and
// messages are applied on the transport's goroutine. A message is applied
// only if it decodes and validates, has this edge's chunk size, and names
// an upstream the index already knows (one in the pool of an instance
// sharing the index) or one of this policy's static upstreams: a hostile
// publisher can at worst mis-route within the pools, never intern a name,
// fail a request or grow the index past its bound.
//
// Remote placements: without hash_key, anyone who can publish on the
// channel can send a Confirmed, so an unkeyed edge applies Confirmed as
// it applies Placed, on probation (prefixindex.Record): it can evict only
// other unconfirmed entries, the probation share of each shard (a
// quarter by default), and never what this edge's own answered requests
// confirmed. A flood of confirmations under made-up tenant scopes, which
// filled the index and turned a tenant's match cold, now churns only
// that share. An entry learned from another edge becomes protected when
// a request of this edge is answered from it. With hash_key, a message
// that verifies comes from an edge of the tier, and Confirmed confirms.

// origin names this process's messages, so that it ignores its echoes.
var origin = edgesync.NewOrigin()

// The sync_hashes values: which of a request's hashes a message carries.
const (
	// SyncHashesAll sends every hash of the request.
	SyncHashesAll = "all"
	// SyncHashesNew sends the hashes the chosen upstream was not believed
	// to hold (at least the deepest): what an earlier message did not
	// already tell the other edges.
	SyncHashesNew = "new"
)

// syncState is an instance's side of the transport.
type syncState struct {
	transport edgesync.Transport
	cancel    func()
	onlyNew   bool
	limits    edgesync.Limits
	auth      *syncAuth // with hash_key: tags what is published, verifies what arrives

	// recv and its buffers are used on the transport's goroutine only.
	recv     edgesync.Message
	hashes   []prefixindex.Hash
	recvLoad edgesync.LoadReport
	loads    []fleet.Load
	cmd      edgesync.Command
	seen     map[[2]uint64]time.Time // commands applied lately (fresh)

	catchUp catchUp // recent placements, to answer edges that catch up

	stopLoad chan struct{} // ends reportLoad and watchCatchUp
	stopOnce sync.Once

	// up is the transport's Connected, as watchCatchUp last saw it
	// (every catchUpPoll): while it is false, the cost keeps requests
	// at their homes (partitioned).
	up atomic.Bool

	applied  [8]atomic.Uint64 // by Kind
	rejected [numRejections]atomic.Uint64
	lag      atomic.Int64 // ns, of the last message applied
}

// Why a received message was not applied.
type rejection uint8

const (
	rejectMalformed rejection = iota // Decode failed
	rejectShape                      // another chunk size
	rejectUpstream                   // not an upstream of the index's pools
	rejectVersion                    // another wire format version
	rejectOrigins                    // a load report from one edge too many
	rejectAuth                       // with hash_key: its tag does not verify
	rejectUnsigned                   // a flush or forget on an unkeyed tier
	rejectStale                      // a flush or forget sent long ago, or applied already
	numRejections
)

var rejectionNames = [numRejections]string{"malformed", "shape", "unknown_upstream", "version", "too_many_origins", "unauthenticated", "unsigned_command", "stale_command"}

// decodeRejection is why a message that failed to decode was rejected: a
// version this build does not read is counted apart from garbage, so that
// a rolling upgrade shows as what it is.
//
// A version 2 would coexist with this one as every versioned format does:
// an edge of the new build reads both versions and keeps publishing
// version 1 until every edge of the tier reads version 2 (a config
// switch), so a mixed tier keeps sharing throughout; edges of this build
// drop version 2 messages, counted as "version".
func decodeRejection(err error) rejection {
	if errors.Is(err, edgesync.ErrVersion) {
		return rejectVersion
	}
	return rejectMalformed
}

// reject counts a message not applied.
func (ss *syncState) reject(r rejection) {
	ss.rejected[r].Add(1)
	metrics.syncRejected(rejectionNames[r])
}

// encodeBufs are the buffers messages are encoded into before Publish
// copies them.
var encodeBufs = sync.Pool{New: func() any { return &encodeBuf{} }}

type encodeBuf struct {
	msg    edgesync.Message
	hashes []uint64
	out    []byte
}

// startSync subscribes the instance to its transport. It runs before the
// instance is published (addInstance), since other goroutines read
// s.sync from the list of instances; the load reports start once the
// instance is in that list (startLoadReports).
func (s *PrefixCacheSelection) startSync(t edgesync.Transport) {
	registerLoadOrigin(s.state.key)
	s.sync = &syncState{
		transport: t,
		onlyNew:   s.SyncHashes == SyncHashesNew,
		limits:    edgesync.Limits{MaxHashes: s.MaxChunks},
		stopLoad:  make(chan struct{}),
	}
	s.sync.catchUp.asked = make(chan struct{}, 1)
	if s.keys.auth != nil {
		s.sync.auth = newSyncAuth(s.keys.auth)
	}
	s.sync.up.Store(t.Status().Connected)
	s.sync.cancel = t.Subscribe(s.receive)
	go s.watchCatchUp(s.sync.stopLoad)
}

// partitioned reports whether this edge has a tier it cannot reach: sync
// is configured and its transport is down, so the other edges learn
// nothing of what this one places, nor it of theirs. The cost then keeps
// requests at their homes, which every edge computes alike
// (selection.Policy.Sticky).
func (s *PrefixCacheSelection) partitioned() bool {
	return s.sync != nil && !s.sync.up.Load()
}

// publish tells the other edges that this one sent v's prompt to dial,
// tentatively (Placed) or answered (Confirmed). from is the first hash
// to send.
func (s *PrefixCacheSelection) publish(kind edgesync.Kind, v *view, dial string, from int) {
	if s.sync == nil || len(v.hashes) == 0 {
		return
	}
	from = min(from, len(v.hashes)-1)
	eb := encodeBufs.Get().(*encodeBuf)
	eb.hashes = eb.hashes[:0]
	for _, h := range v.hashes[from:] {
		eb.hashes = append(eb.hashes, uint64(h))
	}
	eb.msg = edgesync.Message{
		Origin:    origin,
		Sent:      time.Now().UnixNano(),
		Kind:      kind,
		ChunkSize: uint32(s.ChunkSize),
		Scope:     v.scopeKey,
		Upstream:  dial,
		Hashes:    eb.hashes,
	}
	eb.out = eb.msg.AppendBinary(eb.out[:0])
	if len(eb.out) > 0 {
		if kind == edgesync.Confirmed {
			s.sync.catchUp.recent.add(eb.out) // for edges that catch up
		}
		eb.out = s.sync.seal(eb.out)
		if s.sync.transport.Publish(eb.out) {
			metrics.syncPublished(kind)
		}
	}
	eb.msg.Upstream = ""
	encodeBufs.Put(eb)
}

// syncFrom is the first hash a message about a selection carries: all of
// them, or with sync_hashes new those past what the chosen upstream was
// believed to hold.
func (s *PrefixCacheSelection) syncFrom(matchedChunks int) int {
	if s.sync == nil || !s.sync.onlyNew {
		return 0
	}
	return matchedChunks
}

// seal tags msg with hash_key, or returns it as it is without.
func (ss *syncState) seal(msg []byte) []byte {
	if ss.auth == nil {
		return msg
	}
	return ss.auth.seal(msg)
}

// receive applies one message from the transport, on its goroutine.
func (s *PrefixCacheSelection) receive(msg []byte) {
	ss := s.sync
	if ss.auth != nil {
		var ok bool
		if msg, ok = ss.auth.open(msg); !ok {
			ss.reject(rejectAuth)
			return
		}
	}
	switch k := edgesync.KindOf(msg); {
	case k == edgesync.LoadKind:
		s.receiveLoad(msg)
		return
	case edgesync.IsCommand(k):
		s.receiveCommand(msg)
		return
	}
	m := &ss.recv
	if err := m.Decode(msg, ss.limits); err != nil {
		ss.reject(decodeRejection(err))
		return
	}
	if m.Origin == origin {
		return // our own
	}
	if m.ChunkSize != uint32(s.ChunkSize) {
		ss.reject(rejectShape)
		return
	}
	id, ok := s.upstreamID(m.Upstream)
	if !ok {
		ss.reject(rejectUpstream)
		return
	}
	ss.hashes = ss.hashes[:0]
	for _, h := range m.Hashes {
		ss.hashes = append(ss.hashes, prefixindex.Hash(h))
	}
	var scope prefixindex.Scope
	if m.Scope != 0 && s.Tenant != "" {
		scope = s.state.index.Scope(m.Scope, *s.TenantShare)
	}
	if m.Kind == edgesync.Confirmed && ss.auth != nil {
		s.state.index.Confirm(scope, ss.hashes, id)
	} else {
		// Unsigned, a confirmation is anyone's word: on probation, where
		// it evicts no confirmed entry (see remote placements above).
		s.state.index.Record(scope, ss.hashes, id)
	}
	ss.applied[m.Kind].Add(1)
	lag := time.Now().UnixNano() - m.Sent
	ss.lag.Store(lag)
	metrics.syncApplied(m.Kind, time.Duration(lag))
}

// stopSync ends the subscription and the load reports. It may be called
// more than once.
func (s *PrefixCacheSelection) stopSync() {
	if s.sync == nil {
		return
	}
	s.sync.stopOnce.Do(func() {
		if s.sync.cancel != nil {
			s.sync.cancel()
		}
		close(s.sync.stopLoad)
	})
}

// upstreamID returns the index ID of dial if the index knows it, or if it
// is one of this policy's static upstreams (which it interns). The index
// knows the upstreams of the pools every instance sharing it has routed
// from, so every such instance maps a message alike, whichever of their
// pools it is about. It never interns a name from outside the
// configuration: the index's names all came from pools and static
// upstreams.
func (s *PrefixCacheSelection) upstreamID(dial string) (prefixindex.ID, bool) {
	if id, ok := s.state.index.ID(dial); ok {
		return id, true
	}
	for _, d := range s.staticDials {
		if d == dial {
			id, err := s.state.index.Intern(dial)
			return id, err == nil
		}
	}
	return 0, false
}
