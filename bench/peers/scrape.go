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

// engineMetrics are the engine metrics llm-d's plugins read, as the
// llm-d-router metrics extractor maps vLLM's (pkg/epp/framework/plugins/
// datalayer/extractor/metrics: extractor.go, factories.go
// defaultEngineConfigs "vllm").
//
// They are read here, not with the policy's enginemetrics, because the
// peer must read what llm-d reads, as llm-d reads it: the cache geometry
// as two numbers (block_size feeds its prefix scorer's auto-tuning, which
// enginemetrics' KV tokens do not give back), the KV usage summed over
// series where enginemetrics keeps the fullest rank, and a scrape of
// other metrics answered with zeros where enginemetrics says the engine
// is unknown.
type engineMetrics struct {
	waiting   int     // vllm:num_requests_waiting
	kvUsage   float64 // vllm:kv_cache_usage_perc, 0 to 1
	blockSize int     // vllm:cache_config_info's block_size label, 0 if absent
	numBlocks int     // vllm:cache_config_info's num_gpu_blocks label, 0 if absent
	ok        bool    // scraped at least once
}

// Metric names, as vLLM exports them (GIE's vLLM mapping also accepts the
// pre-V1 name of the KV gauge).
const (
	metricWaiting   = "vllm:num_requests_waiting"
	metricKVUsage   = "vllm:kv_cache_usage_perc"
	metricKVUsageV0 = "vllm:gpu_cache_usage_perc"
	metricCacheInfo = "vllm:cache_config_info"
)

// parseEngineMetrics reads the gauges from a Prometheus text exposition,
// summing the two load gauges over label sets (one engine, one series
// each in practice), and the cache geometry from the labels of
// vllm:cache_config_info, as populateCacheInfoMetrics does (strconv.Atoi
// of the block_size and num_gpu_blocks labels; a bad value is left out).
// ok is false when no gauge is present.
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
		if name == metricCacheInfo && line[end] == '{' {
			labels := parseLabels(line[end+1:])
			if v, err := strconv.Atoi(labels["block_size"]); err == nil {
				m.blockSize = v
			}
			if v, err := strconv.Atoi(labels["num_gpu_blocks"]); err == nil {
				m.numBlocks = v
			}
			m.ok = true
			continue
		}
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

// parseLabels parses the label pairs of a sample, from just after its
// "{" to its "}", unescaping quoted values.
func parseLabels(b []byte) map[string]string {
	labels := map[string]string{}
	for len(b) > 0 && b[0] != '}' {
		eq := bytes.IndexByte(b, '=')
		if eq < 0 || eq+1 >= len(b) || b[eq+1] != '"' {
			break
		}
		key := string(bytes.TrimSpace(b[:eq]))
		b = b[eq+2:]
		var val []byte
		i := 0
		for ; i < len(b) && b[i] != '"'; i++ {
			if b[i] == '\\' && i+1 < len(b) {
				i++
				if b[i] == 'n' {
					val = append(val, '\n')
					continue
				}
			}
			val = append(val, b[i])
		}
		labels[key] = string(val)
		if i >= len(b) {
			break
		}
		b = bytes.TrimLeft(b[i+1:], ", ")
	}
	return labels
}

// scraper polls the /metrics of every upstream it has been told about, as
// GIE's datastore refreshes its pods' metrics, and keeps the last values.
type scraper struct {
	client   *http.Client
	interval time.Duration

	mu      sync.Mutex
	targets map[string]bool // Dial -> watched
	metrics map[string]engineMetrics
	primed  map[string]bool // Dial -> scraped once on the request path
}

func newScraper(interval time.Duration) *scraper {
	return &scraper{
		client:   &http.Client{Timeout: max(time.Second, 4*interval)},
		interval: interval,
		targets:  map[string]bool{},
		metrics:  map[string]engineMetrics{},
		primed:   map[string]bool{},
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

// prime scrapes dial now if it has never been scraped nor primed, so
// that a router started in front of running engines knows them before its
// first decision, as GIE's datastore has scraped its pods before they
// receive traffic. A failed scrape leaves it to the periodic loop: the
// request path tries each upstream once.
func (s *scraper) prime(ctx context.Context, dial string) engineMetrics {
	s.mu.Lock()
	m, tried := s.metrics[dial], s.primed[dial]
	s.primed[dial] = true
	s.mu.Unlock()
	if m.ok || tried {
		return m
	}
	m, err := s.scrape(ctx, dial)
	if err != nil {
		return engineMetrics{}
	}
	s.mu.Lock()
	if !s.metrics[dial].ok {
		s.metrics[dial] = m
	}
	m = s.metrics[dial]
	s.mu.Unlock()
	return m
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
