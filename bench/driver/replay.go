package driver

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/workload"
)

// load is how a workload is offered: open loop at a request rate, or
// closed loop with a number of users.
type load struct {
	// QPS, if positive, replays open loop: conversation starts are the
	// workload's, rescaled to QPS requests per simulated second.
	QPS float64

	// Users, used when QPS is zero, replays closed loop: each user runs
	// one conversation after another, ignoring start times.
	Users int
}

// replayer sends a workload's requests through the proxy.
type replayer struct {
	urls      []string // the edges' base URLs
	edgeSeed  uint64   // seeds each request's choice of edge
	client    *http.Client
	timeScale float64 // wall seconds per simulated second
	records   []Record
	offsets   []int // index in records of each conversation's first turn
}

// newReplayer prepares the records of w's requests.
func newReplayer(urls []string, edgeSeed uint64, client *http.Client, w *workload.Workload, timeScale float64) *replayer {
	r := &replayer{urls: urls, edgeSeed: edgeSeed, client: client, timeScale: timeScale, offsets: make([]int, len(w.Conversations))}
	n := 0
	for i, c := range w.Conversations {
		r.offsets[i] = n
		n += len(c.Turns)
	}
	r.records = make([]Record, n)
	return r
}

// wall converts a simulated duration to wall time.
func (r *replayer) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) * r.timeScale)
}

// run replays w and returns when every request has ended or ctx is done.
func (r *replayer) run(ctx context.Context, w *workload.Workload, l load) {
	start := time.Now()
	var wg sync.WaitGroup
	if l.QPS > 0 {
		stretch := w.Rate / l.QPS
		timer := time.NewTimer(0)
		defer timer.Stop()
		for i, c := range w.Conversations {
			at := r.wall(time.Duration(float64(c.Start) * stretch))
			if d := time.Until(start.Add(at)); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					wg.Wait()
					return
				case <-timer.C:
				}
			}
			wg.Go(func() { r.conversation(ctx, w, i, start, at) })
		}
	} else {
		var next atomic.Int64
		for range max(1, l.Users) {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= len(w.Conversations) || ctx.Err() != nil {
						return
					}
					r.conversation(ctx, w, i, start, time.Since(start))
				}
			})
		}
	}
	wg.Wait()
}

// conversation runs conversation i, whose first turn was due at due.
func (r *replayer) conversation(ctx context.Context, w *workload.Workload, i int, start time.Time, due time.Duration) {
	c := w.Conversations[i]
	s := c.NewSession(w.Model, true)
	for !s.Done() {
		t := s.Turn()
		rec := &r.records[r.offsets[i]+t]
		rec.Conversation, rec.Turn, rec.Session = i, t, c.ID
		turn, body, err := s.Next()
		if err != nil {
			rec.Err = err.Error()
			r.skip(i, t+1, "skipped: "+err.Error())
			return
		}
		if t > 0 && turn.Think > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(r.wall(turn.Think)):
			}
			due = time.Since(start)
		}
		if ctx.Err() != nil {
			r.skip(i, t, "not sent: "+ctx.Err().Error())
			return
		}
		rec.Late = max(0, time.Since(start)-due)
		rec.Edge = edgeFor(r.edgeSeed, i, t, len(r.urls))
		answer := stream(ctx, r.client, r.urls[rec.Edge]+"/v1/chat/completions", c.ID, body, start, rec)
		if !rec.OK() {
			r.skip(i, t+1, "skipped after an error in this conversation")
			return
		}
		s.Answer(answer)
	}
}

// skip marks conversation i's turns from t on as not sent.
func (r *replayer) skip(i, t int, why string) {
	end := len(r.records)
	if i+1 < len(r.offsets) {
		end = r.offsets[i+1]
	}
	for j := r.offsets[i] + t; j < end; j++ {
		r.records[j].Conversation, r.records[j].Turn = i, j-r.offsets[i]
		r.records[j].Err = why
	}
}
