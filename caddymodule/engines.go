package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/prefixcache/caddy-prefixcache/enginemetrics"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// The engines behind the upstreams publish what the policy otherwise
// guesses: vLLM, SGLang, TGI and llama.cpp's server report on their
// Prometheus endpoint how many requests they run and queue. With
// engine_metrics, each instance scrapes its pool's upstreams in the
// background, through the reverse_proxy's own transport (so TLS to the
// engines is the handler's, as for Caddy's active health checks), and the
// engines' queues join the load bound: an engine busy with other edges'
// or other clients' requests is bounded by all of its load, not by this
// Caddy's share of it. A scrape never runs on the request path; a failed,
// slow, stale or unrecognised one leaves that upstream bounded as
// without engine_metrics.

// Defaults of engine_metrics.
const (
	// DefaultMetricsURI is where vLLM, SGLang, TGI and llama.cpp's
	// server publish their metrics.
	DefaultMetricsURI = "/metrics"
	// DefaultMetricsInterval is how often each upstream is scraped: a
	// vLLM scrape is tens of kilobytes of text, of which only the few
	// lines read are parsed (BenchmarkParse), and an engine's queue
	// drains in seconds.
	DefaultMetricsInterval = caddy.Duration(time.Second)
	// DefaultMetricsTimeout is how long a scrape may take.
	DefaultMetricsTimeout = caddy.Duration(time.Second)
	// DefaultBytesPerToken converts an engine's KV capacity in tokens to
	// the index's routing text: English prose and code run at 3.5 to 4.5
	// bytes per token in the tokenizers of Llama 3, Qwen and GPT-4, and
	// routing text leaves out the chat template's own tokens.
	DefaultBytesPerToken = 4.0
)

const (
	// maxScrapeBytes bounds the body one scrape reads; a vLLM scrape is
	// well under 1 MiB even with many models.
	maxScrapeBytes = 4 << 20
	// staleScrapes is how many intervals a sample counts for: a lost
	// scrape or two change nothing, an engine that stopped answering
	// stops counting within seconds.
	staleScrapes = 3
	// minMetricsInterval keeps a configuration from turning scrapes
	// into a load of their own.
	minMetricsInterval = 10 * time.Millisecond
)

// EngineMetrics configures the scrapes of the upstreams' own metrics.
type EngineMetrics struct {
	// Path and query of each upstream's Prometheus endpoint.
	// Default: `/metrics`.
	URI string `json:"uri,omitempty"`

	// Port to scrape, when not the upstream's own. Default: the
	// upstream's.
	Port int `json:"port,omitempty"`

	// How often each upstream is scraped, with up to a tenth of random
	// jitter so that edges do not scrape in step. Default: `1s`.
	Interval caddy.Duration `json:"interval,omitempty"`

	// How long one scrape may take; at most interval. Default: `1s`.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// Header fields sent with each scrape, e.g. an Authorization an
	// engine's metrics endpoint requires. Default: none.
	Header http.Header `json:"header,omitempty"`

	// Whether the engines' running and waiting requests join the load
	// bound: an upstream's load is this Caddy's requests in flight plus
	// what its engine has beyond them (or what the other edges report
	// with sync, whichever is more). For engines that also serve
	// clients not behind this tier; in the benchmarks it gained
	// nothing, and at 4 edges without sync it cost hit rate. Default:
	// `false`.
	Queue *bool `json:"queue,omitempty"`

	// Whether the index believes each engine holds no more than its KV
	// cache does (vLLM's num_gpu_blocks x block_size, SGLang's
	// max_total_num_tokens): the prefixes sent to it longest ago, past
	// its capacity, count as evicted. Default: `false`.
	Capacity bool `json:"capacity,omitempty"`

	// Whether each engine's prefill_rate is measured from its own
	// counters of prompt tokens computed and seconds spent prefilling
	// (vLLM, SGLang with device timers, llama.cpp), in place of the
	// configured prefill_rate, which stays the rate of an engine that
	// publishes none. Needs prefill_rate. Default: `false`.
	Prefill bool `json:"prefill,omitempty"`

	// Bytes of routing text per token, to convert an engine's capacity
	// and prefill speed in tokens. Default: `4`.
	BytesPerToken float64 `json:"bytes_per_token,omitempty"`
}

// provision sets the defaults; validate checks.
func (m *EngineMetrics) provision() {
	if m.URI == "" {
		m.URI = DefaultMetricsURI
	}
	if m.Interval == 0 {
		m.Interval = DefaultMetricsInterval
	}
	if m.Timeout == 0 {
		m.Timeout = min(DefaultMetricsTimeout, m.Interval)
	}
	if m.Queue == nil {
		off := false
		m.Queue = &off
	}
	if m.BytesPerToken == 0 {
		m.BytesPerToken = DefaultBytesPerToken
	}
}

func (m *EngineMetrics) validate() error {
	u, err := url.ParseRequestURI(m.URI)
	switch {
	case err != nil || u.Scheme != "" || u.Host != "":
		return fmt.Errorf("engine_metrics: uri must be a path and query, got %q", m.URI)
	case m.Port < 0 || m.Port > 65535:
		return fmt.Errorf("engine_metrics: port must be from 1 to 65535, got %d", m.Port)
	case time.Duration(m.Interval) < minMetricsInterval:
		return fmt.Errorf("engine_metrics: interval must be at least %v, got %v", minMetricsInterval, time.Duration(m.Interval))
	case m.Timeout <= 0 || m.Timeout > m.Interval:
		return fmt.Errorf("engine_metrics: timeout must be positive and at most interval (%v), got %v", time.Duration(m.Interval), time.Duration(m.Timeout))
	case !(m.BytesPerToken >= 0.5 && m.BytesPerToken <= 64): // also rejects NaN
		return fmt.Errorf("engine_metrics: bytes_per_token must be from 0.5 to 64, got %v", m.BytesPerToken)
	}
	return nil
}

// scrapeOutcome is the result of one scrape, a bounded set: it is a
// metric label.
type scrapeOutcome uint8

const (
	scrapeOK            scrapeOutcome = iota
	scrapeFailed                      // no response: refused, reset, TLS
	scrapeTimeout                     // no whole response within timeout
	scrapeStatus                      // a status other than 200
	scrapeTooLarge                    // a body past maxScrapeBytes, or more lines of engine metrics than an engine writes
	scrapeGarbled                     // not a Prometheus exposition
	scrapeUnknownEngine               // well-formed, of no engine enginemetrics knows
	scrapeUnsupported                 // an upstream address that cannot be scraped (a unix socket)
)

var scrapeOutcomeNames = [...]string{
	scrapeOK:            "ok",
	scrapeFailed:        "failed",
	scrapeTimeout:       "timeout",
	scrapeStatus:        "status",
	scrapeTooLarge:      "too_large",
	scrapeGarbled:       "garbled",
	scrapeUnknownEngine: "unknown_engine",
	scrapeUnsupported:   "unsupported_address",
}

func (o scrapeOutcome) String() string { return scrapeOutcomeNames[o] }

// scraper scrapes one instance's upstreams, from the first Select until
// the instance is cleaned up.
type scraper struct {
	cfg     *EngineMetrics
	handler *reverseproxy.Handler // whose Transport the scrapes use
	ctx     context.Context       // the config's: done when it is unloaded
	logger  *zap.Logger

	start sync.Once
	stop  chan struct{}
	done  chan struct{}

	mu   sync.Mutex
	busy map[string]bool   // upstreams with a scrape in progress
	last map[string]string // each upstream's last outcome, for the log
}

// newScraper returns the scraper of an instance, or nil without
// engine_metrics.
func newScraper(ctx caddy.Context, cfg *EngineMetrics, logger *zap.Logger) *scraper {
	if cfg == nil {
		return nil
	}
	return &scraper{
		cfg: cfg, handler: handlerOf(ctx), ctx: ctx, logger: logger,
		stop: make(chan struct{}), done: make(chan struct{}),
		busy: map[string]bool{}, last: map[string]string{},
	}
}

// startScraping starts s's scraper on its first call, from Provision;
// it scrapes once the config runs (currentPool).
func (s *PrefixCacheSelection) startScraping() {
	sc := s.scraper
	if sc == nil {
		return
	}
	sc.start.Do(func() {
		go sc.run(s)
	})
}

// stopScraping stops s's scraper and waits for it, if it started.
func (s *PrefixCacheSelection) stopScraping() {
	sc := s.scraper
	if sc == nil {
		return
	}
	close(sc.stop)
	started := true
	sc.start.Do(func() { started = false })
	if started {
		<-sc.done
	}
}

// run scrapes every upstream of s's latest pool each interval (plus up
// to a tenth of jitter), one scrape per upstream at a time, until stop.
func (sc *scraper) run(s *PrefixCacheSelection) {
	defer close(sc.done)
	// After the last scrape: the connections the scrapes leave idle in
	// the old config's transport would otherwise outlive it, when a
	// scrape ends after Caddy's cleanup of the transport closed its idle
	// ones.
	defer sc.closeIdle()
	var wg sync.WaitGroup
	defer wg.Wait()
	interval := time.Duration(sc.cfg.Interval)
	timer := time.NewTimer(rand.N(interval/10 + 1))
	defer timer.Stop()
	var client *http.Client
	for {
		select {
		case <-sc.stop:
			return
		case <-sc.ctx.Done():
			return
		case <-timer.C:
		}
		timer.Reset(interval + rand.N(interval/10+1))
		pool := s.currentPool()
		if pool == nil {
			continue
		}
		if client == nil {
			// Only now: the handler sets its default transport after
			// provisioning the policy.
			if client = sc.client(); client == nil {
				sc.logger.Warn("engine_metrics: the reverse_proxy has no transport to scrape with; engines are not scraped")
				return
			}
		}
		sc.forgetDeparted(*pool)
		for _, u := range *pool {
			sc.mu.Lock()
			if sc.busy[u.Dial] {
				sc.mu.Unlock()
				continue
			}
			sc.busy[u.Dial] = true
			sc.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				outcome := sc.scrape(s, client, u)
				if sc.stopping() {
					// A reload or stop cancelled it: not the engine's
					// doing, neither counted nor logged.
					sc.mu.Lock()
					delete(sc.busy, u.Dial)
					sc.mu.Unlock()
					return
				}
				metrics.scraped(outcome)
				sc.mu.Lock()
				delete(sc.busy, u.Dial)
				// An upstream is presumed ok until a scrape says
				// otherwise, so a new config's first good scrape is no
				// change.
				last, seen := sc.last[u.Dial]
				changed := outcome.String() != last && (seen || outcome != scrapeOK)
				sc.last[u.Dial] = outcome.String()
				sc.mu.Unlock()
				if changed {
					sc.logger.Info("engine_metrics: scrape outcome changed",
						zap.String("upstream", u.Dial), zap.String("outcome", outcome.String()))
				}
			}()
		}
	}
}

// stopping reports whether the scraper is being stopped: its config's
// context is done, or Cleanup asked it to stop.
func (sc *scraper) stopping() bool {
	select {
	case <-sc.stop:
		return true
	case <-sc.ctx.Done():
		return true
	default:
		return false
	}
}

// closeIdle closes the idle connections of the transport the scrapes
// used.
func (sc *scraper) closeIdle() {
	if sc.handler == nil {
		return
	}
	if t, ok := sc.handler.Transport.(*reverseproxy.HTTPTransport); ok && t.Transport != nil {
		t.Transport.CloseIdleConnections()
	}
}

// forgetDeparted drops the last outcomes of upstreams no longer in pool,
// so that dynamic upstreams coming and going grow nothing.
func (sc *scraper) forgetDeparted(pool reverseproxy.UpstreamPool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if len(sc.last) <= len(pool) {
		return
	}
	in := make(map[string]bool, len(pool))
	for _, u := range pool {
		in[u.Dial] = true
	}
	for dial := range sc.last {
		if !in[dial] {
			delete(sc.last, dial)
		}
	}
}

// client is the HTTP client of the scrapes: the handler's transport, a
// timeout, and no redirects (a metrics endpoint that redirects is
// misconfigured, and a redirect could leave the engine).
func (sc *scraper) client() *http.Client {
	if sc.handler == nil || sc.handler.Transport == nil {
		return nil
	}
	return &http.Client{
		Transport: sc.handler.Transport,
		Timeout:   time.Duration(sc.cfg.Timeout),
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// scrape scrapes u once and, on success, stores its sample under u's
// index ID.
func (sc *scraper) scrape(s *PrefixCacheSelection, client *http.Client, u *reverseproxy.Upstream) scrapeOutcome {
	target, ok := sc.target(u.Dial)
	if !ok {
		return scrapeUnsupported
	}
	req, err := http.NewRequestWithContext(sc.ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return scrapeUnsupported
	}
	for k, vs := range sc.cfg.Header {
		if http.CanonicalHeaderKey(k) == "Host" && len(vs) > 0 {
			req.Host = vs[0]
			continue
		}
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return scrapeTimeout
		}
		return scrapeFailed
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection is reused
		return scrapeStatus
	}
	lr := &io.LimitedReader{R: resp.Body, N: maxScrapeBytes + 1}
	sample, err := enginemetrics.Parse(lr, resp.Header)
	if lr.N == 0 || errors.Is(err, enginemetrics.ErrTooMuch) {
		return scrapeTooLarge
	}
	switch {
	case errors.Is(err, enginemetrics.ErrUnknownEngine):
		return scrapeUnknownEngine
	case isTimeout(err) || errors.Is(err, context.DeadlineExceeded):
		return scrapeTimeout
	case err != nil:
		return scrapeGarbled
	}
	id, ok := s.state.index.ID(u.Dial)
	if !ok {
		return scrapeOK // never routed to yet: nothing to bound
	}
	s.state.fleet.Scraped(id, u.Dial, time.Now().UnixNano(), sample, u.NumRequests())
	if sc.cfg.Capacity && sample.KVTokens > 0 {
		chunks := sample.KVTokens * sc.cfg.BytesPerToken / float64(s.ChunkSize)
		s.state.fleet.PublishCapacity(s.state.index, id, int(min(chunks, prefixindex.MaxCapacity)))
	}
	return scrapeOK
}

// target is the URL that scrapes the upstream at dial: its host and port
// (or engine_metrics' port), the scheme the transport's TLS settings give
// a health check on that port, and uri. Placeholders in dial are
// replaced with their global values; a unix socket is not scraped.
func (sc *scraper) target(dial string) (*url.URL, bool) {
	addr, err := caddy.ParseNetworkAddress(caddy.NewReplacer().ReplaceAll(dial, ""))
	if err != nil || addr.IsUnixNetwork() || addr.PortRangeSize() != 1 {
		return nil, false
	}
	port := strconv.Itoa(int(addr.StartPort))
	if sc.cfg.Port != 0 {
		port = strconv.Itoa(sc.cfg.Port)
	}
	ref, err := url.ParseRequestURI(sc.cfg.URI)
	if err != nil {
		return nil, false
	}
	u := &url.URL{Scheme: "http", Host: net.JoinHostPort(addr.Host, port), Path: ref.Path, RawQuery: ref.RawQuery}
	if o, ok := sc.handler.Transport.(reverseproxy.HealthCheckSchemeOverriderTransport); ok {
		o.OverrideHealthCheckScheme(u, port)
	}
	return u, true
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// releaseCapacities lifts the engines' capacities of s's index when s
// was the last live instance on it that set them: a reload that turns
// capacity off, or drops engine_metrics, leaves no bound behind.
func (s *PrefixCacheSelection) releaseCapacities() {
	if s.EngineMetrics == nil || !s.EngineMetrics.Capacity {
		return
	}
	others := false
	eachInstance(func(x *PrefixCacheSelection) {
		if x.state == s.state && x.EngineMetrics != nil && x.EngineMetrics.Capacity {
			others = true
		}
	})
	if !others {
		s.state.index.ClearCapacities()
		s.state.fleet.ResetCapacities()
	}
}
