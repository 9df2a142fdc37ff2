// Package redis is the http.prefix_cache.sync.redis module: it carries the
// placements of several Caddy edges over one Redis Pub/Sub channel, with
// github.com/redis/go-redis/v9. Anything that speaks Redis's protocol and
// its PUBLISH and SUBSCRIBE commands works the same way (Valkey, KeyDB,
// Dragonfly).
//
// Publishing never runs on the caller's goroutine: Publish copies the
// message into a bounded queue (or drops it, counted), and one background
// goroutine per connection drains the queue, pipelining PUBLISH commands.
// Another goroutine holds the subscription and hands every message on the
// channel to the subscribers. A connection outlives config reloads that
// keep its settings, and reconnects with bounded, jittered exponential
// backoff when Redis goes away; Provision never waits for Redis.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
)

func init() {
	caddy.RegisterModule(new(Transport))
}

// DefaultChannel is the Pub/Sub channel edges share unless configured.
const DefaultChannel = "caddy-prefix-cache"

// DefaultBuffer is the publish queue's length in messages. End to end
// through a local redis-server, sharing two cores with it, the publisher
// and a subscriber move 100,000 to 180,000 messages of 8 hashes per second
// and about 30,000 of 1024 hashes (250 MB/s; BenchmarkThroughput), far
// more than an edge makes (two per request). So the queue only has to
// carry an edge through a stall: 1024 messages is half a second at 1000
// requests per second. It holds at most 1024 times the largest message:
// 8 MiB at 1024 hashes, 17 MiB at the 2048 of
// prefixindex.DefaultMaxChunks.
const DefaultBuffer = 1024

// MaxBuffer caps buffer: a million messages is over an hour of a stalled
// Redis at the default's rate, and the queue's slots alone take 48 bytes
// each before any message is queued.
const MaxBuffer = 1 << 20

// DefaultDialTimeout bounds one connection attempt. Redis on the edges'
// network answers in milliseconds; an unreachable one should not hold the
// reconnect loop for long.
const DefaultDialTimeout = caddy.Duration(2 * time.Second)

// DefaultTimeout bounds every read and write: a PUBLISH pipeline, and the
// subscription's health check, which PINGs every Timeout and declares the
// connection dead when a PING goes unanswered for another Timeout (a
// stopped or partitioned Redis is noticed within 2*Timeout).
const DefaultTimeout = caddy.Duration(3 * time.Second)

// Backoff between reconnect attempts: exponential from minBackoff to
// maxBackoff, with jitter so a fleet of edges does not reconnect in step
// after a Redis restart.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// conns holds one connection per distinct configuration across reloads,
// as Caddy's own hosts and caddy-ratelimit's zones do: a reload that keeps
// url, channel, buffer and timeouts keeps the connection and its
// subscription, so no message is lost to a reconnect.
var conns = caddy.NewUsagePool()

// Transport publishes and receives placement messages over a Redis
// Pub/Sub channel. It implements edgesync.Transport.
type Transport struct {
	// Redis URL: redis://[[user]:password@]host[:port][/db] or rediss://
	// for TLS, with go-redis's query options (such as ?protocol=3). Global
	// placeholders such as {env.REDIS_URL} are replaced at provision.
	// Required.
	URL string `json:"url,omitempty"`

	// Pub/Sub channel the edges share; placeholders are replaced. Default:
	// `caddy-prefix-cache`.
	Channel string `json:"channel,omitempty"`

	// Publish queue length, in messages, at most 1048576; a full queue
	// drops new messages (counted). Default: `1024`.
	Buffer int `json:"buffer,omitempty"`

	// Timeout of one connection attempt. Default: `2s`.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`

	// Timeout of reads and writes, and the health check's PING interval.
	// Default: `3s`.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// TLS settings of a rediss:// URL: the CAs to trust, a client
	// certificate, the server name. Default: the system's roots, no client
	// certificate, the URL's host.
	TLS *TLS `json:"tls,omitempty"`

	key     connKey
	conn    *conn
	mu      sync.Mutex
	cancels []func()
	release sync.Once
}

// CaddyModule returns the Caddy module information.
func (*Transport) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.prefix_cache.sync.redis",
		New: func() caddy.Module { return new(Transport) },
	}
}

// connKey is what makes two configs share a connection.
type connKey struct {
	url, channel string
	buffer       int
	dial, rw     time.Duration
	tls          uint64 // digest of the TLS settings' files, 0 without
	tuning       tuning
}

// tuning is what the configuration does not set: the reconnect
// backoff's bounds and a name that keeps two connections with the same
// settings apart. Caddy provisions with defaultTuning; tests pass their
// own (helpers_test.go), to reconnect fast and to run several edges in
// one process.
type tuning struct {
	minBackoff, maxBackoff time.Duration
	edge                   string
}

var defaultTuning = tuning{minBackoff: minBackoff, maxBackoff: maxBackoff}

// Provision sets defaults, replaces placeholders and joins (or starts) the
// connection for this configuration. It fails on a bad configuration, not
// on an unreachable Redis: the connection comes up in the background, and
// the edge routes alone until it does.
func (t *Transport) Provision(ctx caddy.Context) error {
	return t.provision(ctx, defaultTuning)
}

// provision is Provision with tun.
func (t *Transport) provision(ctx caddy.Context, tun tuning) error {
	if t.Channel == "" {
		t.Channel = DefaultChannel
	}
	if t.Buffer == 0 {
		t.Buffer = DefaultBuffer
	}
	if t.DialTimeout == 0 {
		t.DialTimeout = DefaultDialTimeout
	}
	if t.Timeout == 0 {
		t.Timeout = DefaultTimeout
	}
	if err := t.Validate(); err != nil {
		return err
	}
	repl := caddy.NewReplacer()
	rawURL, err := repl.ReplaceOrErr(t.URL, true, false)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	channel, err := repl.ReplaceOrErr(t.Channel, true, false)
	if err != nil {
		return fmt.Errorf("channel: %w", err)
	}
	opt, endpoint, err := parseURL(rawURL)
	if err != nil {
		return err
	}
	opt.DialTimeout = time.Duration(t.DialTimeout)
	opt.ReadTimeout = time.Duration(t.Timeout)
	opt.WriteTimeout = time.Duration(t.Timeout)
	var tlsDigest uint64
	if t.TLS != nil {
		if opt.TLSConfig == nil {
			return errors.New("tls settings need a rediss:// url")
		}
		if opt.TLSConfig, tlsDigest, err = t.TLS.config(opt.TLSConfig); err != nil {
			return err
		}
	}

	t.key = connKey{rawURL, channel, t.Buffer, opt.DialTimeout, opt.ReadTimeout, tlsDigest, tun}
	v, _, err := conns.LoadOrNew(t.key, func() (caddy.Destructor, error) {
		return newConn(opt, endpoint, channel, t.Buffer, tun.minBackoff, tun.maxBackoff), nil
	})
	if err != nil {
		return fmt.Errorf("starting redis connection: %w", err)
	}
	t.conn = v.(*conn)
	// The newest config's logger: an old config's log sinks close with it.
	t.conn.setLogger(ctx.Logger(t))
	// Clean up with the config even if the policy that loaded this module
	// does not: Cleanup runs once whoever calls it first.
	stop := context.AfterFunc(ctx, func() { _ = t.Cleanup() })
	t.mu.Lock()
	t.cancels = append(t.cancels, func() { stop() })
	t.mu.Unlock()
	return nil
}

// Validate checks the configuration.
func (t *Transport) Validate() error {
	switch {
	case t.URL == "":
		return errors.New("url is required")
	case t.Buffer < 0 || t.Buffer > MaxBuffer:
		return fmt.Errorf("buffer must be between 1 and %d, got %d", MaxBuffer, t.Buffer)
	case t.DialTimeout < 0:
		return fmt.Errorf("dial_timeout must be positive, got %v", time.Duration(t.DialTimeout))
	case t.Timeout < 0:
		return fmt.Errorf("timeout must be positive, got %v", time.Duration(t.Timeout))
	}
	return nil
}

// Cleanup cancels this instance's subscriptions and releases its share of
// the connection; the last config using a connection closes it. It
// tolerates a partial Provision and being called twice.
func (t *Transport) Cleanup() error {
	t.mu.Lock()
	cancels := t.cancels
	t.cancels = nil
	t.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
	return t.releaseConn()
}

// releaseConn gives back this instance's reference, once.
func (t *Transport) releaseConn() error {
	var err error
	t.release.Do(func() {
		if t.conn == nil {
			return
		}
		_, err = conns.Delete(t.key)
	})
	return err
}

// Publish copies msg into the publish queue. It returns false, counting
// the drop, when the transport is not connected or the queue is full. It
// never blocks and does not allocate once the queue's slots have grown to
// the messages' size.
func (t *Transport) Publish(msg []byte) bool {
	if t.conn == nil {
		return false
	}
	return t.conn.publish(msg)
}

// Subscribe registers fn for every message on the channel, echoes of this
// edge's own included; see edgesync.Transport. Cleanup cancels what is
// left.
func (t *Transport) Subscribe(fn func(msg []byte)) (cancel func()) {
	if t.conn == nil {
		return func() {}
	}
	cancel = t.conn.subscribe(fn)
	t.mu.Lock()
	t.cancels = append(t.cancels, cancel)
	t.mu.Unlock()
	return cancel
}

// Status reports the connection's state and counters; they are shared by
// every config on the same connection and survive reloads.
func (t *Transport) Status() edgesync.Status {
	if t.conn == nil {
		return edgesync.Status{Transport: "redis"}
	}
	return t.conn.status()
}

// parseURL turns a Redis URL into client options and a description of the
// endpoint without credentials, for logs and Status. Its errors never
// repeat the URL, which may hold a password.
func parseURL(raw string) (*goredis.Options, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, "", fmt.Errorf("invalid url: %v", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, "", fmt.Errorf("url scheme must be redis or rediss, got '%s'", u.Scheme)
	}
	opt, err := goredis.ParseURL(raw)
	if err != nil {
		return nil, "", fmt.Errorf("invalid url: %s", redact(err.Error(), u))
	}
	// RESP2 unless the URL asks (?protocol=3): every server that speaks
	// Redis's protocol knows it, and Pub/Sub needs nothing more.
	if opt.Protocol == 0 {
		opt.Protocol = 2
	}
	// The loops below retry with their own backoff; go-redis retrying
	// inside a PUBLISH pipeline would only hold the queue longer.
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.PoolSize = 2
	// No CLIENT SETINFO or MAINT_NOTIFICATIONS handshakes: fewer round
	// trips and nothing a Redis-compatible server might refuse.
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	endpoint := u.Scheme + "://" + opt.Addr + "/" + fmt.Sprint(opt.DB)
	return opt, endpoint, nil
}

// redact removes the URL's password from s.
func redact(s string, u *url.URL) string {
	if p, ok := u.User.Password(); ok && p != "" {
		return strings.ReplaceAll(s, p, "xxxxx")
	}
	return s
}

// Interface guards
var (
	_ caddy.Provisioner  = (*Transport)(nil)
	_ caddy.Validator    = (*Transport)(nil)
	_ caddy.CleanerUpper = (*Transport)(nil)
	_ edgesync.Transport = (*Transport)(nil)
	_ caddy.Module       = (*Transport)(nil)
	_ caddy.Destructor   = (*conn)(nil)
)
