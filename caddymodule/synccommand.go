package caddymodule

import (
	"time"

	"go.uber.org/zap"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
)

// An operator's flush or forget, made through one edge's admin API, is
// published on the channel of every flushed instance with sync
// (edgesync.FlushKind, ForgetKind), and every other edge applies it to
// the index of each of its policies syncing on that channel, as its own
// admin API would. A flush or forget from the channel is an order, and a
// forged one would wipe the tier's affinity at will: an edge applies one
// only when its tier is keyed (hash_key), so that the message verified,
// and only once, within commandWindow of the time it was sent, so that a
// reader cannot send a captured one again later. An unkeyed edge drops
// them (counted as "unsigned_command"), and its admin API does not
// publish them.

// commandWindow is how far a command's time may be from the receiver's
// clock: edges' clocks agree to milliseconds under NTP, and a command
// travels in milliseconds, so a command older (or newer) than this was
// held back, not delayed.
const commandWindow = 30 * time.Second

// maxSeenCommands bounds the commands remembered to refuse a second
// copy: far more than operators send in 2 x commandWindow. Past it, a
// command is refused: only a holder of the key can send that many.
const maxSeenCommands = 1024

// fresh reports whether the command (origin, sent) is within
// commandWindow of now and was not applied before, and remembers it. It
// runs on the receiving goroutine only.
func (ss *syncState) fresh(origin uint64, sent int64, now time.Time) bool {
	at := time.Unix(0, sent)
	if d := now.Sub(at); d > commandWindow || d < -commandWindow {
		return false
	}
	key := [2]uint64{origin, uint64(sent)}
	if _, dup := ss.seen[key]; dup {
		return false
	}
	if len(ss.seen) >= maxSeenCommands {
		for k, t := range ss.seen {
			if now.Sub(t) > commandWindow || t.Sub(now) > commandWindow {
				delete(ss.seen, k)
			}
		}
		if len(ss.seen) >= maxSeenCommands {
			return false
		}
	}
	if ss.seen == nil {
		ss.seen = map[[2]uint64]time.Time{}
	}
	ss.seen[key] = at
	return true
}

// receiveCommand applies a flush or forget from another edge, or answers
// a catch-up request, on the transport's goroutine.
func (s *PrefixCacheSelection) receiveCommand(msg []byte) {
	ss := s.sync
	c := &ss.cmd
	if err := c.Decode(msg); err != nil {
		ss.reject(decodeRejection(err))
		return
	}
	if c.Origin == origin {
		return // our own
	}
	if c.Kind == edgesync.CatchUpKind {
		s.askCatchUp() // not an order: even an unkeyed edge answers
		return
	}
	if ss.auth == nil {
		ss.reject(rejectUnsigned)
		return
	}
	now := time.Now()
	if !ss.fresh(c.Origin, c.Sent, now) {
		ss.reject(rejectStale)
		return
	}
	log := s.logger.With(zap.Uint64("origin", c.Origin))
	switch c.Kind {
	case edgesync.FlushKind:
		s.state.flush()
		log.Info("flushed the index on request of another edge")
	case edgesync.ForgetKind:
		if entries, known := s.state.forget(c.Upstream); known {
			log.Info("forgot an upstream on request of another edge",
				zap.String("upstream", c.Upstream), zap.Int("entries", entries))
		}
	}
	ss.applied[c.Kind].Add(1)
	metrics.syncApplied(c.Kind, now.Sub(time.Unix(0, c.Sent)))
}

// publishCommand publishes c, signed, on the channels of targets that
// sync with hash_key, once per transport, and reports whether any
// transport took it, and whether some target syncs without hash_key
// (and so was not sent it).
func publishCommand(c edgesync.Command, targets []numbered) (sent, unkeyed bool) {
	c.Origin, c.Sent = origin, time.Now().UnixNano()
	done := map[edgesync.Transport]bool{}
	for _, t := range targets {
		ss := t.s.sync
		if ss == nil {
			continue
		}
		if ss.auth == nil {
			unkeyed = true
			continue
		}
		if done[ss.transport] {
			continue
		}
		done[ss.transport] = true
		if ss.transport.Publish(ss.seal(c.AppendBinary(nil))) {
			sent = true
			metrics.syncPublished(c.Kind)
		}
	}
	return sent, unkeyed
}

// flush forgets every entry of the state's index, for the admin API or
// another edge.
func (st *sharedState) flush() {
	st.index.Flush()
	eachInstance(func(x *PrefixCacheSelection) {
		if x.state == st && x.sync != nil {
			x.sync.catchUp.recent.filter(func([]byte) bool { return false })
		}
	})
}

// forget forgets what the upstream dial was believed to hold in the
// state's index, as the janitor does after forget_after, and reports the
// entries it owned and whether the index knew it. The instances sharing
// the index look their upstreams up afresh.
func (st *sharedState) forget(dial string) (entries int, known bool) {
	id, known := st.index.ID(dial)
	if !known {
		return 0, false
	}
	entries = st.index.Owned()[dial]
	st.index.Forget(dial)
	st.fleet.Forget(id)
	eachInstance(func(x *PrefixCacheSelection) {
		if x.state == st {
			x.upstreams.invalidate()
			if x.sync != nil {
				x.forgetRecent(dial)
			}
		}
	})
	return entries, true
}
