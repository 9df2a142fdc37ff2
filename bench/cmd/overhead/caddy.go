package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/child"
)

// caddyConfig serves round_robin on basePort, prefix_cache on basePort+1
// (with -compare usage: prefix_cache, and prefix_cache behind
// prefix_cache_usage),
// and on basePort+2 prefix_cache with a response header naming its
// reason, for the routing check only (the header is not free, so the
// measured sites do without it). Logging is at ERROR, access logs off.
func caddyConfig(cfg config, backends []string) string {
	ups := strings.Join(backends, " ")
	site := func(port int, policy, extra string) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\treverse_proxy %s {\n\t\tlb_policy %s\n%s\t}\n}\n", port, ups, policy, extra)
	}
	admin := "admin off"
	if cfg.pprof != "" {
		admin = fmt.Sprintf("admin 127.0.0.1:%d", cfg.basePort+3)
	}
	global := fmt.Sprintf("{\n\t%s\n\tpersist_config off\n\tauto_https off\n\tlog default {\n\t\tlevel ERROR\n\t}\n}\n", admin)
	if cfg.compare == "usage" {
		usage := fmt.Sprintf("http://127.0.0.1:%d {\n\tprefix_cache_usage\n\treverse_proxy %s {\n\t\tlb_policy prefix_cache\n\t}\n}\n", cfg.basePort+1, ups)
		return global +
			site(cfg.basePort, "prefix_cache", "") +
			usage +
			site(cfg.basePort+2, "prefix_cache", "\t\theader_down X-Prefix-Cache-Reason {http.reverse_proxy.prefix_cache.reason}\n")
	}
	return global +
		site(cfg.basePort, "round_robin", "") +
		site(cfg.basePort+1, "prefix_cache", "") +
		site(cfg.basePort+2, "prefix_cache", "\t\theader_down X-Prefix-Cache-Reason {http.reverse_proxy.prefix_cache.reason}\n")
}

// checkRouting sends every conversation of size twice through the check
// site and counts the reasons prefix_cache gave: the bodies must be
// routed on (match, cold...), not left to the fallback.
func checkRouting(cfg config, dir string, size, convs int) (map[string]int, error) {
	reasons := map[string]int{}
	client := &http.Client{Timeout: 10 * time.Second}
	for range 2 {
		for i := range convs {
			body, err := os.ReadFile(bodyPath(dir, size, i))
			if err != nil {
				return nil, err
			}
			resp, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", cfg.basePort+2), "application/json", bytes.NewReader(body))
			if err != nil {
				return nil, err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("check request: status %s", resp.Status)
			}
			reasons[resp.Header.Get("X-Prefix-Cache-Reason")]++
		}
	}
	if reasons["fallback"] > 0 {
		return reasons, fmt.Errorf("prefix_cache left %d check requests to the fallback: %v", reasons["fallback"], reasons)
	}
	return reasons, nil
}

// profile loads each policy's site with wrk in throughput mode while it
// takes a CPU profile and an allocation profile (a delta over the same
// interval) of the Caddy process through its admin endpoint's
// /debug/pprof, and writes them as DIR/{cpu,allocs}-SIZE-POLICY.pprof.
// Read them with go tool pprof (the Caddy binary is not needed: Go
// profiles carry symbols).
func profile(cfg config, caddy *child.Proc, size int, script string) error {
	if err := os.MkdirAll(cfg.pprof, 0o755); err != nil {
		return err
	}
	secs := max(1, int(cfg.pprofDur.Seconds()))
	for p, policy := range policies {
		type fetched struct {
			name string
			err  error
		}
		done := make(chan fetched, 2)
		for _, kind := range []string{"profile", "allocs"} {
			name := "cpu"
			if kind == "allocs" {
				name = "allocs"
			}
			file := filepath.Join(cfg.pprof, fmt.Sprintf("%s-%s-%s.pprof", name, sizeName(size), policy))
			url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/%s?seconds=%d", cfg.basePort+3, kind, secs)
			go func() { done <- fetched{file, fetch(url, file)} }()
		}
		// The load starts with the profiles and outlasts them by two seconds.
		if _, err := wrk(cfg, caddy, cfg.basePort+p, script, cfg.conns, time.Duration(secs+2)*time.Second); err != nil {
			return err
		}
		for range 2 {
			f := <-done
			if f.err != nil {
				return fmt.Errorf("profiling %s: %w", policy, f.err)
			}
			log.Printf("wrote %s", f.name)
		}
	}
	return nil
}

func fetch(url, file string) error {
	resp, err := (&http.Client{Timeout: time.Minute}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}
