package caddymodule

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
)

// An edge that starts, or whose transport reconnects, has missed what
// the others learned. So every edge keeps its most recent confirmed
// placements as it published them (recentPlacements), and an edge whose
// subscription comes up asks for them (edgesync.CatchUpKind); every
// other edge then publishes its recent ones again, and the newcomer
// applies them as it applies any placement. An edge whose subscription
// comes up also publishes its own again, for the others who missed them
// (it placed them while it could not publish, or they could not hear). The answer is bounded: at
// most catchUpMessages messages and catchUpBytes bytes per edge, at most
// once per catchUpGap whoever asks and however often (and once more each
// time its own subscription comes up), paced so that it does not crowd
// the transport's queue out of the edge's own messages.
// Every edge receives the answer, and re-applying what it already holds
// only refreshes it. A request from the channel is not an order (it
// changes no index), so even an unkeyed edge answers one: a publisher
// who sends many makes each edge publish at most catchUpBytes per
// catchUpGap.
//
// A reload's new instance finds the connection up and the index it
// shares full, and asks nothing; an instance whose index is empty when
// it starts asks as soon as it is connected, and any instance asks after
// its transport reconnects.

const (
	// catchUpMessages and catchUpBytes bound the placements one edge
	// keeps to answer with: the last 512 answered requests, enough for
	// the conversations active in the last seconds at hundreds of
	// requests a second, and at most 2 MiB (a 1024-hash message is 8 KiB),
	// which a loopback or LAN Redis moves in milliseconds.
	catchUpMessages = 512
	catchUpBytes    = 2 << 20
	// catchUpGap is the least time between two answers of one edge.
	catchUpGap = 5 * time.Second
	// catchUpPoll is how often an edge looks whether its transport came
	// up, and catchUpPace how long it lets the transport's queue drain
	// when an answer has filled half of it.
	catchUpPoll = 100 * time.Millisecond
	catchUpPace = 5 * time.Millisecond
)

// recentPlacements is a ring of the last confirmed placements an
// instance published, encoded, before any tag: an answer sends them
// again with the time they are sent again (so the receivers' lag stays
// the channel's) and a fresh tag.
type recentPlacements struct {
	mu    sync.Mutex
	msgs  [catchUpMessages][]byte // the kept ones; nil past them
	head  int                     // the oldest
	n     int
	bytes int
	// spare is the buffer of the last message dropped, for the next
	// one: with a full ring, each message kept drops one, so keeping
	// them allocates nothing.
	spare []byte
}

// add keeps a copy of msg, dropping the oldest to stay within the
// bounds. It allocates only when the spare buffer is too small for msg,
// or far too large. What the ring holds stays within about twice
// catchUpBytes, however large the messages once were: a buffer kept
// holds at most twice its message and a kilobyte.
func (r *recentPlacements) add(msg []byte) {
	if len(msg) > catchUpBytes {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.n == catchUpMessages || (r.n > 0 && r.bytes+len(msg) > catchUpBytes) {
		r.bytes -= len(r.msgs[r.head])
		r.spare, r.msgs[r.head] = r.msgs[r.head], nil
		r.head = (r.head + 1) % catchUpMessages
		r.n--
	}
	buf := r.spare
	r.spare = nil
	if cap(buf) > 2*len(msg)+1024 {
		buf = nil
	}
	r.msgs[(r.head+r.n)%catchUpMessages] = append(buf[:0], msg...)
	r.bytes += len(msg)
	r.n++
}

// snapshot appends copies of the kept messages, oldest first, to dst.
func (r *recentPlacements) snapshot(dst [][]byte) [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.n {
		m := r.msgs[(r.head+k)%catchUpMessages]
		dst = append(dst, append([]byte(nil), m...))
	}
	return dst
}

// filter keeps only the messages keep accepts, in order.
func (r *recentPlacements) filter(keep func([]byte) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var next [catchUpMessages][]byte
	n, bytes := 0, 0
	for k := range r.n {
		if m := r.msgs[(r.head+k)%catchUpMessages]; keep(m) {
			next[n] = m
			n++
			bytes += len(m)
		}
	}
	r.msgs, r.head, r.n, r.bytes = next, 0, n, bytes
}

// catchUp is an instance's side of catching up.
type catchUp struct {
	recent    recentPlacements
	asked     chan struct{} // another edge asked; the watcher answers
	requested atomic.Uint64 // catch-up requests this instance sent
	answered  atomic.Uint64 // messages it published again in answers
}

// askCatchUp tells the instance's watcher that another edge asked for
// recent placements, without waiting.
func (s *PrefixCacheSelection) askCatchUp() {
	select {
	case s.sync.catchUp.asked <- struct{}{}:
	default:
	}
}

// watchCatchUp runs for an instance with sync until stop is closed: it
// asks the others for their recent placements when the transport comes
// up (and at once if it is up and the index is empty), and answers their
// requests.
func (s *PrefixCacheSelection) watchCatchUp(stop <-chan struct{}) {
	ss := s.sync
	t := time.NewTicker(catchUpPoll)
	defer t.Stop()
	st := ss.transport.Status()
	ss.up.Store(st.Connected)
	if st.Connected && s.state.index.Stats().Entries == 0 {
		s.requestCatchUp()
	}
	reconnects := st.Reconnects
	var last time.Time // of the last answer to a request
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			// Back (or up at last): it was down when last looked at, or
			// it reconnected since, however briefly it was down.
			st := ss.transport.Status()
			wasUp := ss.up.Swap(st.Connected)
			back := st.Connected && (!wasUp || st.Reconnects != reconnects)
			reconnects = st.Reconnects
			if back {
				// Ask for what the others placed meanwhile, and tell
				// them what this edge placed, which it could not
				// publish, or which they missed, being down themselves
				// when it did. The first of two edges to reconnect asks
				// while the other cannot hear yet; the other's telling
				// makes up for it.
				s.requestCatchUp()
				s.answerCatchUp(stop)
			}
		case <-ss.catchUp.asked:
			if !last.IsZero() && time.Since(last) < catchUpGap {
				continue
			}
			if s.answerCatchUp(stop) > 0 {
				last = time.Now()
			}
		}
	}
}

// requestCatchUp publishes a catch-up request.
func (s *PrefixCacheSelection) requestCatchUp() {
	c := edgesync.Command{Kind: edgesync.CatchUpKind, Origin: origin, Sent: time.Now().UnixNano()}
	if s.sync.transport.Publish(s.sync.seal(c.AppendBinary(nil))) {
		s.sync.catchUp.requested.Add(1)
		metrics.syncPublished(edgesync.CatchUpKind)
	}
}

// answerCatchUp publishes the instance's recent placements again,
// letting the transport's queue drain whenever it is half full, and
// returns how many the transport took.
func (s *PrefixCacheSelection) answerCatchUp(stop <-chan struct{}) int {
	ss := s.sync
	n := 0
	for _, m := range ss.catchUp.recent.snapshot(nil) {
		for st := ss.transport.Status(); st.Buffer > 0 && 2*st.Queued >= st.Buffer; st = ss.transport.Status() {
			select {
			case <-stop:
				return n
			case <-time.After(catchUpPace):
			}
		}
		edgesync.SetSent(m, time.Now().UnixNano())
		if ss.transport.Publish(ss.seal(m)) {
			ss.catchUp.answered.Add(1)
			n++
		}
	}
	return n
}

// forgetRecent drops the kept placements naming dial, so that an answer
// does not teach the others what a forget took out.
func (s *PrefixCacheSelection) forgetRecent(dial string) {
	ss := s.sync
	var m edgesync.Message
	ss.catchUp.recent.filter(func(b []byte) bool {
		return m.Decode(b, ss.limits) != nil || m.Upstream != dial
	})
}
