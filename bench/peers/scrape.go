package peers

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// engineMetrics are the engine gauges llm-d's scorers read.
type engineMetrics struct {
	waiting int     // vllm:num_requests_waiting
	kvUsage float64 // vllm:kv_cache_usage_perc, 0 to 1
	ok      bool    // scraped at least once
}

// Metric names, as vLLM exports them (GIE's vLLM mapping also accepts the
// pre-V1 name of the KV gauge).
const (
	metricWaiting   = "vllm:num_requests_waiting"
	metricKVUsage   = "vllm:kv_cache_usage_perc"
	metricKVUsageV0 = "vllm:gpu_cache_usage_perc"
)

// parseEngineMetrics reads the two gauges from a Prometheus text
// exposition, summing over label sets (one engine, one series each in
// practice). ok is false when neither gauge is present.
func parseEngineMetrics(r io.Reader) (engineMetrics, error) {
	var m engineMetrics
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		end := bytes.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		name := string(line[:end])
		if name != metricWaiting && name != metricKVUsage && name != metricKVUsageV0 {
			continue
		}
		// The value follows the labels (which may hold spaces in quoted
		// values) and precedes an optional timestamp.
		rest := line[end:]
		if rest[0] == '{' {
			rb := bytes.LastIndexByte(rest, '}')
			if rb < 0 {
				continue
			}
			rest = rest[rb+1:]
		}
		fields := bytes.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(string(fields[0]), 64)
		if err != nil {
			continue
		}
		m.ok = true
		if name == metricWaiting {
			m.waiting += int(v)
		} else {
			m.kvUsage += v
		}
	}
	return m, sc.Err()
}

// scraper polls the /metrics of every upstream it has been told about, as
// GIE's datastore refreshes its pods' metrics, and keeps the last values.
type scraper struct {
	client   *http.Client
	interval time.Duration

	mu      sync.Mutex
	targets map[string]bool // Dial -> watched
	metrics map[string]engineMetrics
}

func newScraper(interval time.Duration) *scraper {
	return &scraper{
		client:   &http.Client{Timeout: max(time.Second, 4*interval)},
		interval: interval,
		targets:  map[string]bool{},
		metrics:  map[string]engineMetrics{},
	}
}

// watch adds dial to the upstreams to scrape.
func (s *scraper) watch(dial string) {
	s.mu.Lock()
	s.targets[dial] = true
	s.mu.Unlock()
}

// get returns dial's last metrics.
func (s *scraper) get(dial string) engineMetrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metrics[dial]
}

// run scrapes every watched upstream each interval until ctx is done.
func (s *scraper) run(ctx context.Context) {
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	defer s.client.CloseIdleConnections()
	var dials []string
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		dials = dials[:0]
		s.mu.Lock()
		for d := range s.targets {
			dials = append(dials, d)
		}
		s.mu.Unlock()
		var wg sync.WaitGroup
		for _, d := range dials {
			wg.Go(func() {
				m, err := s.scrape(ctx, d)
				if err != nil {
					return // keep the last good values, as GIE does until they are stale
				}
				s.mu.Lock()
				s.metrics[d] = m
				s.mu.Unlock()
			})
		}
		wg.Wait()
	}
}

func (s *scraper) scrape(ctx context.Context, dial string) (engineMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+dial+"/metrics", nil)
	if err != nil {
		return engineMetrics{}, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return engineMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return engineMetrics{}, errStatus(resp.StatusCode)
	}
	return parseEngineMetrics(resp.Body)
}

type errStatus int

func (e errStatus) Error() string { return "metrics: status " + strconv.Itoa(int(e)) }
