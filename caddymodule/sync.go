package caddymodule

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// Several edges share what they learn, and their load (tierload.go),
// through a transport module of the prefix_cache.sync namespace
// (edgesync/redis). Each edge publishes what it records: at selection the
// chunk hashes and the chosen upstream's Dial (Placed), and at the
// request's end, when the upstream answered 2xx, the same again
// (Confirmed). Every edge applies what the others publish
// to its own index, Placed as a Record (on probation) and Confirmed as a
// Confirm, so each routes as if it had seen every request. None of it is
// on the request path: Publish only queues (or drops) a copy, and
// messages are applied on the transport's goroutine. A message is applied
// only if it decodes and validates, has this edge's chunk size, and names
// an upstream in this policy's own pool: a hostile publisher can at worst
// mis-route within the pool, never intern a name, fail a request or grow
// the index past its bound.

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

	// recv and its buffers are used on the transport's goroutine only.
	recv      edgesync.Message
	hashes    []prefixindex.Hash
	recvLoad  edgesync.LoadReport
	loadIDs   []prefixindex.ID
	loadReq   []int64
	loadBytes []int64

	stopLoad chan struct{} // ends reportLoad

	applied  [4]atomic.Uint64 // by Kind
	rejected [numRejections]atomic.Uint64
	lag      atomic.Int64 // ns, of the last message applied
}

// Why a received message was not applied.
type rejection uint8

const (
	rejectMalformed rejection = iota // Decode failed
	rejectShape                      // another chunk size
	rejectUpstream                   // not in this policy's pool
	numRejections
)

var rejectionNames = [numRejections]string{"malformed", "shape", "unknown_upstream"}

// encodeBufs are the buffers messages are encoded into before Publish
// copies them.
var encodeBufs = sync.Pool{New: func() any { return &encodeBuf{} }}

type encodeBuf struct {
	msg    edgesync.Message
	hashes []uint64
	out    []byte
}

// startSync subscribes the instance to its transport.
func (s *PrefixCacheSelection) startSync(t edgesync.Transport) {
	s.sync = &syncState{
		transport: t,
		onlyNew:   s.SyncHashes == SyncHashesNew,
		limits:    edgesync.Limits{MaxHashes: s.MaxChunks},
	}
	s.sync.cancel = t.Subscribe(s.receive)
	s.sync.stopLoad = make(chan struct{})
	go s.reportLoad(s.sync.stopLoad)
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

// receive applies one message from the transport, on its goroutine.
func (s *PrefixCacheSelection) receive(msg []byte) {
	if edgesync.KindOf(msg) == edgesync.LoadKind {
		s.receiveLoad(msg)
		return
	}
	ss := s.sync
	m := &ss.recv
	if err := m.Decode(msg, ss.limits); err != nil {
		ss.rejected[rejectMalformed].Add(1)
		metrics.syncRejected(rejectionNames[rejectMalformed])
		return
	}
	if m.Origin == origin {
		return // our own
	}
	if m.ChunkSize != uint32(s.ChunkSize) {
		ss.rejected[rejectShape].Add(1)
		metrics.syncRejected(rejectionNames[rejectShape])
		return
	}
	id, ok := s.upstreamID(m.Upstream)
	if !ok {
		ss.rejected[rejectUpstream].Add(1)
		metrics.syncRejected(rejectionNames[rejectUpstream])
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
	if m.Kind == edgesync.Confirmed {
		s.state.index.Confirm(scope, ss.hashes, id)
	} else {
		s.state.index.Record(scope, ss.hashes, id)
	}
	ss.applied[m.Kind].Add(1)
	lag := time.Now().UnixNano() - m.Sent
	ss.lag.Store(lag)
	metrics.syncApplied(m.Kind, time.Duration(lag))
}

// stopSync ends the subscription and the load reports.
func (s *PrefixCacheSelection) stopSync() {
	if s.sync == nil {
		return
	}
	if s.sync.cancel != nil {
		s.sync.cancel()
	}
	if s.sync.stopLoad != nil {
		close(s.sync.stopLoad)
	}
}

// upstreamID returns the index ID of dial if it is in this policy's pool:
// the pool it last routed from, or, before its first request, its static
// upstreams. It never interns a name from outside the configuration.
func (s *PrefixCacheSelection) upstreamID(dial string) (prefixindex.ID, bool) {
	if t := s.upstreams.cur.Load(); t != nil && t.ix == s.state.index {
		for i, d := range t.dials {
			if d == dial {
				return t.ids[i], t.ids[i] != 0
			}
		}
		return 0, false
	}
	for _, d := range s.staticDials {
		if d == dial {
			id, err := s.state.index.Intern(dial)
			return id, err == nil
		}
	}
	return 0, false
}
