package driver

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sampler polls the engines' /metrics for their in-flight requests
// (vllm:num_requests_running plus vllm:num_requests_waiting), as an
// operator's Prometheus would, and keeps every sample.
type sampler struct {
	client   *http.Client
	addrs    []string
	interval time.Duration

	mu      sync.Mutex
	samples [][]int // per sample, in-flight per engine; -1 when unreadable
}

// run samples until ctx is done.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		row := make([]int, len(s.addrs))
		var wg sync.WaitGroup
		for i, a := range s.addrs {
			wg.Go(func() { row[i] = s.inFlight(ctx, a) })
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.samples = append(s.samples, row)
		s.mu.Unlock()
	}
}

// inFlight reads one engine's running plus waiting requests, or -1.
func (s *sampler) inFlight(ctx context.Context, addr string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return -1
	}
	n, found := 0, 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "vllm:num_requests_running") && !strings.HasPrefix(line, "vllm:num_requests_waiting") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return -1
		}
		n += int(v)
		found++
	}
	if found != 2 {
		return -1
	}
	return n
}

// Samples returns the samples taken so far.
func (s *sampler) Samples() [][]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}
