package caddymodule

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/fleet"
	"github.com/prefixcache/caddy-prefixcache/selection"
)

// The metrics are created once per process and registered into each
// config's registry, so counters keep counting across reloads. Their labels
// are bounded: a reason or skip cause from a fixed set, or an upstream's
// Dial. Nothing derived from a prompt is ever a label.
var metrics = newMetricSet()

type metricSet struct {
	selections      *prometheus.CounterVec
	peeks           *prometheus.CounterVec
	matchedFraction prometheus.Histogram
	promptBytes     prometheus.Counter
	matchedBytes    prometheus.Counter
	settlements     *prometheus.CounterVec
	syncMessages    *prometheus.CounterVec
	syncRejections  *prometheus.CounterVec
	syncLag         prometheus.Histogram
	scrapes         *prometheus.CounterVec
	answerTokens    *prometheus.CounterVec
	answers         *prometheus.CounterVec
	state           stateCollector
}

const namespace, subsystem = "caddy", "prefix_cache"

func newMetricSet() *metricSet {
	m := &metricSet{
		selections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "selections_total",
			Help: "Upstream selections by reason: match, spill, spill_cold, cold, cold_spill, least_loaded, prefill, or fallback for requests the policy could not route on.",
		}, []string{"reason"}),
		peeks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "body_peeks_total",
			Help: "Request bodies examined, by outcome: routed, or why the body was left to the fallback policy.",
		}, []string{"outcome"}),
		matchedFraction: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name:    "matched_fraction",
			Help:    "Fraction of each routed prompt the chosen upstream was believed to hold in its KV cache.",
			Buckets: []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1},
		}),
		promptBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "prompt_bytes_total",
			Help: "Bytes of routing text of routed requests.",
		}),
		matchedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "predicted_hit_bytes_total",
			Help: "Bytes of routing text the chosen upstreams were believed to hold: the predicted prefix-cache hits.",
		}),
		settlements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "settlements_total",
			Help: "Routed requests at their end, by outcome: confirmed (the chosen upstream answered 2xx, so its index entries were protected) or unconfirmed (any other status, or no answer: the entries stay on probation).",
		}, []string{"outcome"}),
		syncMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "sync_messages_total",
			Help: "Messages shared with the other edges: published by this edge (accepted by the transport) or applied from others, by kind: placed (at selection), confirmed (the engine answered 2xx), load (an edge's requests in flight per upstream, every 100 ms), flush and forget (an operator's, through one edge's admin API, with hash_key), or catch_up (a request for the others' recent placements, sent by an edge that starts or reconnects).",
		}, []string{"direction", "kind"}),
		syncRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "sync_rejected_total",
			Help: "Messages from other edges not applied, by reason: malformed, shape (another chunk_size), unknown_upstream (not in this policy's pool), version, too_many_origins, unauthenticated (with hash_key, its tag does not verify), unsigned_command (a flush or forget without hash_key), stale_command (a flush or forget sent again, or held back).",
		}, []string{"reason"}),
		syncLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name:    "sync_lag_seconds",
			Help:    "From a message's publication on another edge to its application here (the edges' clocks must agree).",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}),
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "engine_scrapes_total",
			Help: "Scrapes of the upstreams' own metrics (engine_metrics), by outcome: ok, failed (no response), timeout, status (not 200), too_large, garbled (not a Prometheus exposition), unknown_engine (no vLLM, SGLang, TGI or llama.cpp metric), unsupported_address (a unix socket). Any outcome but ok leaves the upstream bounded as without engine_metrics.",
		}, []string{"outcome"}),
		answerTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "answer_tokens_total",
			Help: "Prompt tokens of routed requests as the engines' answers counted them (prefix_cache_usage), by kind: prompt (all of them) or cached (what the engine had in its prefix cache). cached / prompt is the fleet's real hit rate.",
		}, []string{"kind"}),
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "answers_total",
			Help: "Routed requests whose answer said what the engine had cached (prefix_cache_usage), by how it compared with the index's prediction, within a quarter of the prompt: as_predicted, less_cached (the engine had evicted, or never held, what the index believed), more_cached.",
		}, []string{"outcome"}),
	}
	// Every label value exists from the start, so rates work from zero.
	for _, r := range selection.Reasons() {
		if r.String() != "none" {
			m.selections.WithLabelValues(r.String())
		}
	}
	m.selections.WithLabelValues("fallback")
	m.peeks.WithLabelValues("routed")
	m.settlements.WithLabelValues("confirmed")
	m.settlements.WithLabelValues("unconfirmed")
	for _, dir := range []string{"published", "applied"} {
		for _, k := range []edgesync.Kind{edgesync.Placed, edgesync.Confirmed, edgesync.LoadKind, edgesync.FlushKind, edgesync.ForgetKind, edgesync.CatchUpKind} {
			m.syncMessages.WithLabelValues(dir, k.String())
		}
	}
	for _, r := range rejectionNames {
		m.syncRejections.WithLabelValues(r)
	}
	for _, o := range scrapeOutcomeNames {
		m.scrapes.WithLabelValues(o)
	}
	m.answerTokens.WithLabelValues("prompt")
	m.answerTokens.WithLabelValues("cached")
	for _, o := range fleet.Outcomes {
		m.answers.WithLabelValues(o.String())
	}
	for c := skipCause(1); int(c) < len(skipNames); c++ {
		m.peeks.WithLabelValues(c.String())
	}
	return m
}

// registerMetrics registers the collectors into a config's registry; a
// collector already there (another instance of this config) is fine.
func registerMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{
		metrics.selections, metrics.peeks, metrics.matchedFraction,
		metrics.promptBytes, metrics.matchedBytes, metrics.settlements,
		metrics.syncMessages, metrics.syncRejections, metrics.syncLag, metrics.scrapes,
		metrics.answerTokens, metrics.answers, &metrics.state,
	} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return err
			}
		}
	}
	return nil
}

func (m *metricSet) skipped(cause skipCause) {
	m.peeks.WithLabelValues(cause.String()).Inc()
	m.selections.WithLabelValues("fallback").Inc()
}

func (m *metricSet) settled(confirmed bool) {
	if confirmed {
		m.settlements.WithLabelValues("confirmed").Inc()
	} else {
		m.settlements.WithLabelValues("unconfirmed").Inc()
	}
}

func (m *metricSet) syncPublished(k edgesync.Kind) {
	m.syncMessages.WithLabelValues("published", k.String()).Inc()
}

func (m *metricSet) syncApplied(k edgesync.Kind, lag time.Duration) {
	m.syncMessages.WithLabelValues("applied", k.String()).Inc()
	m.syncLag.Observe(max(lag, 0).Seconds())
}

func (m *metricSet) answered(u usage, o fleet.Outcome) {
	m.answerTokens.WithLabelValues("prompt").Add(float64(u.prompt))
	m.answerTokens.WithLabelValues("cached").Add(float64(u.cached))
	m.answers.WithLabelValues(o.String()).Inc()
}

func (m *metricSet) scraped(o scrapeOutcome) {
	m.scrapes.WithLabelValues(o.String()).Inc()
}

func (m *metricSet) syncRejected(reason string) {
	m.syncRejections.WithLabelValues(reason).Inc()
}

func (m *metricSet) selected(d decision) {
	m.peeks.WithLabelValues("routed").Inc()
	m.selections.WithLabelValues(d.reason).Inc()
	m.promptBytes.Add(float64(d.promptBytes))
	m.matchedBytes.Add(float64(d.matched))
	if d.promptBytes > 0 {
		m.matchedFraction.Observe(float64(d.matched) / float64(d.promptBytes))
	}
}

// stateCollector reports the indexes and the upstreams of the running
// configs when scraped.
type stateCollector struct{}

var (
	descEntries = prometheus.NewDesc("caddy_prefix_cache_index_entries",
		"Prefixes the indexes remember.", nil, nil)
	descCapacity = prometheus.NewDesc("caddy_prefix_cache_index_capacity",
		"Most prefixes the indexes may remember (max_entries, summed over indexes).", nil, nil)
	descBytes = prometheus.NewDesc("caddy_prefix_cache_index_bytes",
		"Memory held by the indexes.", nil, nil)
	descEvictions = prometheus.NewDesc("caddy_prefix_cache_index_evictions_total",
		"Prefixes forgotten to stay within max_entries, since the process started (indexes dropped since included).", nil, nil)
	descInFlight = prometheus.NewDesc("caddy_prefix_cache_upstream_in_flight",
		"Requests in flight to the upstream from this Caddy.", []string{"upstream"}, nil)
	descInFlightBytes = prometheus.NewDesc("caddy_prefix_cache_upstream_in_flight_bytes",
		"Prompt bytes (routing text) of the requests in flight to the upstream from this Caddy: the byte bound's load.", []string{"upstream"}, nil)
	descOwned = prometheus.NewDesc("caddy_prefix_cache_upstream_owned_entries",
		"Index entries the upstream is believed to hold: its share of the learned prefixes.", []string{"upstream"}, nil)
	descBodyInUse = prometheus.NewDesc("caddy_prefix_cache_body_bytes_in_use",
		"Bytes of request-body buffers (at their allocated size) and chunk hashes that requests hold, across the process.", nil, nil)
	descBodyAllocated = prometheus.NewDesc("caddy_prefix_cache_body_bytes_allocated",
		"Bytes of request-body and routing-text buffers alive (in use, idle in the pool, or dropped and not yet collected) and of the chunk hashes of requests being routed. body_budget bounds it.", nil, nil)
	descBodyBudget = prometheus.NewDesc("caddy_prefix_cache_body_budget_bytes",
		"The largest body_budget of the running policies: the most the body buffers may take.", nil, nil)
	syncLabels        = []string{"transport", "endpoint", "channel"}
	descSyncConnected = prometheus.NewDesc("caddy_prefix_cache_sync_connected",
		"1 while the sync transport can publish and receive, 0 while the edge routes alone.", syncLabels, nil)
	descSyncDropped = prometheus.NewDesc("caddy_prefix_cache_sync_dropped_total",
		"Messages this edge's transport did not deliver: queue full, disconnected, or failed after queueing.", syncLabels, nil)
	descSyncReceived = prometheus.NewDesc("caddy_prefix_cache_sync_received_total",
		"Messages the transport received from the channel, this edge's own echoes included.", syncLabels, nil)
	descSyncReconnects = prometheus.NewDesc("caddy_prefix_cache_sync_reconnects_total",
		"Connections the transport made after its first.", syncLabels, nil)
	descSyncQueued = prometheus.NewDesc("caddy_prefix_cache_sync_queued",
		"Messages waiting in the transport's publish queue.", syncLabels, nil)
	descScrapeOK = prometheus.NewDesc("caddy_prefix_cache_engine_scrape_ok",
		"1 if the upstream's last scrape (engine_metrics) succeeded, 0 if it failed (engine_scrapes_total says how); absent before its first scrape.", []string{"upstream"}, nil)
)

// Describe implements prometheus.Collector.
func (*stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEntries, descCapacity, descBytes, descEvictions, descInFlight, descInFlightBytes, descOwned, descBodyInUse, descBodyAllocated, descBodyBudget,
		descSyncConnected, descSyncDropped, descSyncReceived, descSyncReconnects, descSyncQueued, descScrapeOK} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (*stateCollector) Collect(ch chan<- prometheus.Metric) {
	var entries, capacity, bytes float64
	evictions := float64(evictionsRetired.Load())
	var budget int64
	owned := map[string]int{}
	seen := map[*sharedState]bool{}
	inFlight := map[string]int{}
	inFlightBytes := map[string]int64{}
	type stateDial struct {
		st   *sharedState
		dial string
	}
	counted := map[stateDial]bool{} // instances sharing a state share its bytes
	syncs := map[[3]string]edgesync.Status{}
	scrapeUp := map[string]float64{} // 0 if any instance's last scrape failed
	eachInstance(func(s *PrefixCacheSelection) {
		budget = max(budget, s.BodyBudget)
		if sc := s.scraper; sc != nil {
			sc.mu.Lock()
			for dial, outcome := range sc.last {
				ok := 0.0
				if outcome == scrapeOK.String() {
					ok = 1
				}
				if v, seen := scrapeUp[dial]; !seen || ok < v {
					scrapeUp[dial] = ok
				}
			}
			sc.mu.Unlock()
		}
		if s.sync != nil {
			st := s.sync.transport.Status()
			syncs[[3]string{st.Transport, st.Endpoint, st.Channel}] = st
		}
		if pool := s.lastPool.Load(); pool != nil {
			tab := s.upstreams.table(s.state.index, *pool)
			for i, u := range *pool {
				inFlight[u.Dial] = u.NumRequests()
				if k := (stateDial{s.state, u.Dial}); !counted[k] {
					counted[k] = true
					inFlightBytes[u.Dial] += s.state.fleet.Read(tab.ids[i], u.Dial, 0, &fleet.Options{}).Bytes
				}
			}
		}
		if seen[s.state] {
			return
		}
		seen[s.state] = true
		st := s.state.index.Stats()
		entries += float64(st.Entries)
		capacity += float64(st.Capacity)
		bytes += float64(st.Bytes)
		evictions += float64(st.Evictions)
		for name, n := range s.state.index.Owned() {
			owned[name] += n
		}
	})
	ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, entries)
	ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, capacity)
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, bytes)
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, evictions)
	hashes := float64(bodyHashes.Load())
	ch <- prometheus.MustNewConstMetric(descBodyInUse, prometheus.GaugeValue, float64(bodyInUse.Load())+hashes)
	ch <- prometheus.MustNewConstMetric(descBodyAllocated, prometheus.GaugeValue, float64(bodyAllocated.Load())+hashes)
	ch <- prometheus.MustNewConstMetric(descBodyBudget, prometheus.GaugeValue, float64(budget))
	for k, st := range syncs {
		connected := 0.0
		if st.Connected {
			connected = 1
		}
		ch <- prometheus.MustNewConstMetric(descSyncConnected, prometheus.GaugeValue, connected, k[:]...)
		ch <- prometheus.MustNewConstMetric(descSyncDropped, prometheus.CounterValue, float64(st.Dropped()), k[:]...)
		ch <- prometheus.MustNewConstMetric(descSyncReceived, prometheus.CounterValue, float64(st.Received), k[:]...)
		ch <- prometheus.MustNewConstMetric(descSyncReconnects, prometheus.CounterValue, float64(st.Reconnects), k[:]...)
		ch <- prometheus.MustNewConstMetric(descSyncQueued, prometheus.GaugeValue, float64(st.Queued), k[:]...)
	}
	for name, n := range inFlight {
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(n), name)
	}
	for name, n := range inFlightBytes {
		ch <- prometheus.MustNewConstMetric(descInFlightBytes, prometheus.GaugeValue, float64(n), name)
	}
	for name, n := range owned {
		ch <- prometheus.MustNewConstMetric(descOwned, prometheus.GaugeValue, float64(n), name)
	}
	for name, ok := range scrapeUp {
		ch <- prometheus.MustNewConstMetric(descScrapeOK, prometheus.GaugeValue, ok, name)
	}
}
