package redis

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
)

// maxBatch is the most PUBLISH commands in one pipeline. Pipelining is
// what makes the publisher fast: one command per round trip moves about
// 20,000 messages a second through a local redis-server, batches of 16 to
// 512 over 100,000 (BenchmarkThroughput, 8 hashes; the sizes in between
// differ by less than the noise). 128 amortises a round trip and keeps what one
// failed pipeline loses small.
const maxBatch = 128

// conn is one Redis connection shared by every config with the same
// settings: a client for publishing, a subscription, and the two
// goroutines that run them.
type conn struct {
	client   *goredis.Client
	channel  string
	endpoint string // no credentials
	password string // only to scrub it from error texts
	timeout  time.Duration
	minB     time.Duration
	maxB     time.Duration

	// queue carries copies of published messages to the publisher; free
	// holds the copies' buffers for reuse. Together they hold exactly
	// cap(queue) buffers, so Publish takes one from free or drops.
	queue chan []byte
	free  chan []byte

	up          atomic.Bool // subscribed: Publish accepts messages
	published   atomic.Uint64
	droppedFull atomic.Uint64
	droppedDown atomic.Uint64
	failed      atomic.Uint64
	received    atomic.Uint64
	oversized   atomic.Uint64
	reconnects  atomic.Uint64

	subsMu sync.Mutex
	subs   atomic.Pointer[[]*subscriber]

	logger atomic.Pointer[zap.Logger]

	mu        sync.Mutex
	since     time.Time
	lastErr   string
	everUp    bool
	pubLogged bool          // a publishing failure was logged
	changed   chan struct{} // closed and replaced at every change of up or lastErr
	ps        *goredis.PubSub
	closed    bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// subscriber is one Subscribe call's callback.
type subscriber struct {
	fn       func([]byte)
	panicked atomic.Bool
}

// newConn starts the publisher and subscriber goroutines; neither waits
// for Redis.
func newConn(opt *goredis.Options, endpoint, channel string, buffer int, minB, maxB time.Duration) *conn {
	c := &conn{
		client:   goredis.NewClient(opt),
		channel:  channel,
		endpoint: endpoint,
		password: opt.Password,
		timeout:  opt.ReadTimeout,
		minB:     minB,
		maxB:     maxB,
		queue:    make(chan []byte, buffer),
		free:     make(chan []byte, buffer),
		since:    time.Now(),
		changed:  make(chan struct{}),
	}
	for range buffer {
		c.free <- nil
	}
	c.subs.Store(new([]*subscriber))
	c.logger.Store(zap.NewNop())
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(2)
	go c.publishLoop()
	go c.subscribeLoop()
	return c
}

// Destruct stops both goroutines and closes the connections; the usage
// pool calls it when the last config lets go. Closing the subscription
// ends the subscriber at once; a PUBLISH pipeline under way to a Redis
// that stopped answering ends by its write timeout and then its read
// timeout (go-redis does not interrupt I/O on the cancelled context), so
// Destruct returns within twice Timeout, and at once in every other case.
func (c *conn) Destruct() error {
	c.cancel()
	c.mu.Lock()
	c.closed = true
	if c.ps != nil {
		_ = c.ps.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
	// Only now: closing the client under a pipeline in flight makes
	// go-redis log about the connection it was using.
	err := c.client.Close()
	c.setDown(errors.New("closed"), false)
	return err
}

func (c *conn) setLogger(l *zap.Logger) {
	c.logger.Store(l.With(zap.String("endpoint", c.endpoint), zap.String("channel", c.channel)))
}

// publish is Transport.Publish.
func (c *conn) publish(msg []byte) bool {
	if len(msg) > edgesync.MaxMessageSize {
		c.oversized.Add(1)
		return false
	}
	if !c.up.Load() {
		c.droppedDown.Add(1)
		return false
	}
	var buf []byte
	select {
	case buf = <-c.free:
	default:
		c.droppedFull.Add(1)
		return false
	}
	buf = append(buf[:0], msg...)
	select {
	case c.queue <- buf:
		return true
	default: // unreachable: queue has room for every buffer
		c.free <- buf
		c.droppedFull.Add(1)
		return false
	}
}

// publishLoop drains the queue into pipelines of PUBLISH commands until
// the connection is destroyed. A failed pipeline counts its messages as
// failed and backs off before the next.
func (c *conn) publishLoop() {
	defer c.wg.Done()
	pipe := c.client.Pipeline()
	batch := make([][]byte, 0, maxBatch)
	failures := 0
	for {
		select {
		case <-c.ctx.Done():
			return
		case b := <-c.queue:
			batch = append(batch, b)
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case b := <-c.queue:
				batch = append(batch, b)
			default:
				break fill
			}
		}
		for _, b := range batch {
			pipe.Publish(c.ctx, c.channel, b)
		}
		cmds, err := pipe.Exec(c.ctx)
		var ok uint64
		for _, cmd := range cmds {
			if cmd.Err() == nil {
				ok++
			}
		}
		// cmds is empty if the pipeline never started.
		c.published.Add(ok)
		c.failed.Add(uint64(len(batch)) - ok)
		c.mu.Lock()
		c.notify()
		c.mu.Unlock()
		for i, b := range batch {
			c.free <- b
			batch[i] = nil
		}
		batch = batch[:0]
		if err == nil {
			failures = 0
			c.setPublishing(nil)
			continue
		}
		if c.ctx.Err() != nil {
			return
		}
		c.setPublishing(err)
		if !c.wait(c.backoff(failures)) {
			return
		}
		failures++
	}
}

// subscribeLoop holds the subscription: one session per connection, and
// a backoff between sessions that failed.
func (c *conn) subscribeLoop() {
	defer c.wg.Done()
	failures := 0
	for c.ctx.Err() == nil {
		wasUp, err := c.session()
		if c.ctx.Err() != nil {
			return
		}
		c.setDown(err, true)
		if wasUp {
			failures = 0
		}
		if !c.wait(c.backoff(failures)) {
			return
		}
		failures++
	}
}

// session subscribes and delivers messages until the connection fails.
// It reports whether the subscription was ever confirmed, and why it
// ended.
func (c *conn) session() (wasUp bool, err error) {
	ps := c.client.Subscribe(c.ctx)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = ps.Close()
		return false, errors.New("closed")
	}
	c.ps = ps
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.ps = nil
		c.mu.Unlock()
		_ = ps.Close()
	}()
	if err := ps.Subscribe(c.ctx, c.channel); err != nil {
		return false, err
	}

	// The health check: a PING every timeout, and the connection is dead
	// when nothing (pong or message) came back by the next tick.
	var seen atomic.Bool
	var dead atomic.Pointer[error]
	done := make(chan struct{})
	defer close(done)
	c.wg.Add(1) // under subscribeLoop's count, so never racing Destruct's Wait
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(c.timeout)
		defer t.Stop()
		pinged := false
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			// Swap on every tick, so what arrived before this PING cannot
			// vouch for the connection after it.
			if replied := seen.Swap(false); pinged && !replied {
				err := errors.New("no reply to PING within " + c.timeout.String())
				dead.Store(&err)
				_ = ps.Close()
				return
			}
			if err := ps.Ping(c.ctx); err != nil {
				dead.Store(&err)
				_ = ps.Close()
				return
			}
			pinged = true
		}
	}()

	var buf []byte
	for {
		msg, err := ps.Receive(c.ctx)
		if err != nil {
			if d := dead.Load(); d != nil {
				err = *d
			}
			return wasUp, err
		}
		seen.Store(true)
		switch msg := msg.(type) {
		case *goredis.Subscription:
			if msg.Kind == "subscribe" && !wasUp {
				wasUp = true
				c.setUp()
			}
		case *goredis.Message:
			// Nothing this large is a placement; not copying it keeps
			// buf, which lives as long as the session, bounded.
			if len(msg.Payload) > edgesync.MaxMessageSize {
				c.oversized.Add(1)
				continue
			}
			c.received.Add(1)
			buf = append(buf[:0], msg.Payload...)
			c.deliver(buf)
		}
	}
}

// deliver hands msg to every subscriber in turn. A subscriber that panics
// is logged once and does not stop the others or the connection.
func (c *conn) deliver(msg []byte) {
	for _, s := range *c.subs.Load() {
		c.call(s, msg)
	}
}

func (c *conn) call(s *subscriber, msg []byte) {
	defer func() {
		if r := recover(); r != nil && !s.panicked.Swap(true) {
			c.logger.Load().Error("sync subscriber panicked; later panics of this subscriber are not logged",
				zap.Any("panic", r))
		}
	}()
	s.fn(msg)
}

// subscribe registers fn; the returned cancel removes it.
func (c *conn) subscribe(fn func([]byte)) func() {
	s := &subscriber{fn: fn}
	c.subsMu.Lock()
	old := *c.subs.Load()
	next := append(make([]*subscriber, 0, len(old)+1), old...)
	next = append(next, s)
	c.subs.Store(&next)
	c.subsMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.subsMu.Lock()
			defer c.subsMu.Unlock()
			old := *c.subs.Load()
			next := make([]*subscriber, 0, len(old))
			for _, o := range old {
				if o != s {
					next = append(next, o)
				}
			}
			c.subs.Store(&next)
		})
	}
}

// setUp records a confirmed subscription and logs the change.
func (c *conn) setUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.up.Load() {
		return
	}
	if c.everUp {
		c.reconnects.Add(1)
	}
	c.everUp = true
	c.up.Store(true)
	c.since = time.Now()
	c.notify()
	c.logger.Load().Info("sync connected")
}

// setDown records a lost (or never made) connection; it logs only a
// change, and the first failure to connect.
func (c *conn) setDown(err error, log bool) {
	reason := c.scrub(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	wasUp := c.up.Load()
	first := !c.everUp && c.lastErr == ""
	if reason != c.lastErr {
		c.lastErr = reason
		c.notify()
	}
	if !wasUp && !first {
		return
	}
	c.up.Store(false)
	if wasUp {
		c.since = time.Now()
		c.notify()
	}
	if !log {
		return
	}
	if wasUp {
		c.logger.Load().Warn("sync disconnected; routing on the local index until it is back", zap.String("reason", reason))
	} else {
		c.logger.Load().Warn("sync cannot connect; routing on the local index until it can", zap.String("reason", reason))
	}
}

// setPublishing records whether the last pipeline succeeded. It logs a
// failure only while the subscription is up: when Redis is gone,
// setDown has said so already.
func (c *conn) setPublishing(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		if c.pubLogged {
			c.logger.Load().Info("sync publishing again")
		}
		c.pubLogged = false
		return
	}
	reason := c.scrub(err)
	if reason != c.lastErr {
		c.lastErr = reason
		c.notify()
	}
	if !c.pubLogged && c.up.Load() {
		c.pubLogged = true
		c.logger.Load().Warn("sync publishing failed; messages are dropped until it recovers", zap.String("reason", reason))
	}
}

// scrub turns err into a reason fit for logs and Status: never the
// password, even if a server or library were to echo it.
func (c *conn) scrub(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if c.password != "" {
		s = strings.ReplaceAll(s, c.password, "xxxxx")
	}
	return s
}

// status is Transport.Status.
func (c *conn) status() edgesync.Status {
	c.mu.Lock()
	since, lastErr := c.since, c.lastErr
	c.mu.Unlock()
	return edgesync.Status{
		Transport:           "redis",
		Endpoint:            c.endpoint,
		Channel:             c.channel,
		Connected:           c.up.Load(),
		Since:               since,
		LastError:           lastErr,
		Published:           c.published.Load(),
		DroppedFull:         c.droppedFull.Load(),
		DroppedDisconnected: c.droppedDown.Load(),
		Failed:              c.failed.Load(),
		Received:            c.received.Load(),
		Oversized:           c.oversized.Load(),
		Reconnects:          c.reconnects.Load(),
		Queued:              len(c.queue),
		Buffer:              cap(c.queue),
		Subscribers:         len(*c.subs.Load()),
	}
}

// notify wakes whoever waits on changes; c.mu is held.
func (c *conn) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// changes returns a channel closed at the next change of Connected or
// LastError, or after the next pipeline, for tests that wait on state
// instead of sleeping.
func (c *conn) changes() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// backoff is the wait after the n-th consecutive failure (from 0):
// exponential from minB to maxB, the upper half jittered ("equal
// jitter"), so it never falls below half the exponential step.
func (c *conn) backoff(n int) time.Duration {
	d := c.minB << min(n, 30)
	if d > c.maxB || d <= 0 {
		d = c.maxB
	}
	return d/2 + rand.N(d/2+1)
}

// wait sleeps for d unless the connection is destroyed first, and
// reports whether it slept out d.
func (c *conn) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}
