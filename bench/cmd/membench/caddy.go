package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/child"
)

// caddyProc is one Caddy process under measurement: the real binary
// (`caddy run`), so its memory is what an operator's Caddy would use, with
// the memory limit Caddy's main sets (90% of the machine's memory here).
type caddyProc struct {
	proc  *child.Proc
	site  string // base URL of the proxied site
	admin string // base URL of the admin API
}

// siteConfig is the JSON config of one site proxying to upstreams with
// policy (a selection policy object), HTTP/1.1 and h2c on the site.
func siteConfig(site, admin string, upstreams []string, policy map[string]any) []byte {
	var ups []map[string]any
	for _, u := range upstreams {
		ups = append(ups, map[string]any{"dial": u})
	}
	cfg := map[string]any{
		"admin":   map[string]any{"listen": admin, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"bench": map[string]any{
			"listen":    []string{site},
			"protocols": []string{"h1", "h2", "h2c"},
			"metrics":   map[string]any{},
			"routes": []any{map[string]any{"handle": []any{map[string]any{
				"handler":        "reverse_proxy",
				"upstreams":      ups,
				"flush_interval": -1,
				"load_balancing": map[string]any{"selection_policy": policy},
			}}}},
		}}}},
	}
	b, _ := json.Marshal(cfg)
	return b
}

// startCaddy runs bin with cfg and waits until its admin API and site
// (host:port addresses) listen.
func startCaddy(bin, dir string, cfg []byte, site, admin string) (*caddyProc, error) {
	path := filepath.Join(dir, "caddy-"+strings.ReplaceAll(site, ":", "-")+".json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return nil, err
	}
	spec := child.Caddy("caddy", bin, dir, path, "")
	spec.StopTimeout = 10 * time.Second
	p, err := child.Start(context.Background(), spec)
	if err != nil {
		return nil, err
	}
	if err := child.WaitListening(p, 30*time.Second, admin, site); err != nil {
		p.Stop()
		return nil, fmt.Errorf("caddy did not start: %w", err)
	}
	return &caddyProc{proc: p, site: "http://" + site, admin: "http://" + admin}, nil
}

func (c *caddyProc) stop() { c.proc.Stop() }

// rss returns the process's resident set and its peak (VmRSS, VmHWM), in
// bytes.
func (c *caddyProc) rss() (cur, peak int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", c.proc.Pid()))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch k {
		case "VmRSS":
			cur = n << 10
		case "VmHWM":
			peak = n << 10
		}
	}
	return cur, peak
}

// adminClient reads Caddy's admin API uncompressed: sampled 20 times a
// second, gzipped metrics make Caddy allocate a gzip compressor on every
// scrape, garbage the measurement would add to what it measures. (A heap
// profile is gzipped whatever the client asks: -heap-profile's own
// allocations show in the profiles it takes.)
var adminClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// metric returns the samples of Caddy's /metrics whose name starts with
// prefix, by full series name.
func (c *caddyProc) metric(prefix string) map[string]float64 {
	out := map[string]float64{}
	resp, err := adminClient.Get(c.admin + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// sampler records the maxima of Caddy's RSS, of the policy's body bytes
// in use and allocated, and of Go's heap in use, every interval until
// stopped; with profile set, also Caddy's heap profile
// (/debug/pprof/heap) each time the heap in use grows by a MiB past its
// largest so far, keeping the last.
type sampler struct {
	c      *caddyProc
	stopCh chan struct{}
	done   sync.WaitGroup
	mu     sync.Mutex
	peaks  peaks
}

type peaks struct {
	RSS       int64
	InUse     float64
	Allocated float64
	Heap      float64
	// Profile is the heap profile taken nearest the largest heap in use.
	Profile []byte
}

func sample(c *caddyProc, every time.Duration, profile bool) *sampler {
	s := &sampler{c: c, stopCh: make(chan struct{})}
	s.done.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		profiled := 0.0
		for {
			cur, _ := c.rss()
			m := c.metric("")
			heap := m["go_memstats_heap_inuse_bytes"]
			var prof []byte
			if profile && heap > profiled+1<<20 {
				if p, err := c.get("/debug/pprof/heap"); err == nil {
					prof, profiled = p, heap
				}
			}
			s.mu.Lock()
			s.peaks.RSS = max(s.peaks.RSS, cur)
			s.peaks.InUse = max(s.peaks.InUse, m["caddy_prefix_cache_body_bytes_in_use"])
			s.peaks.Allocated = max(s.peaks.Allocated, m["caddy_prefix_cache_body_bytes_allocated"])
			s.peaks.Heap = max(s.peaks.Heap, heap)
			if prof != nil {
				s.peaks.Profile = prof
			}
			s.mu.Unlock()
			select {
			case <-s.stopCh:
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *sampler) stop() peaks {
	close(s.stopCh)
	s.done.Wait()
	return s.peaks
}

// get returns the body of a GET of the admin API's path.
func (c *caddyProc) get(path string) ([]byte, error) {
	resp, err := adminClient.Get(c.admin + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// drain reads r to its end.
func drain(r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}
