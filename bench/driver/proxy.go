package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile" // the caddyfile adapter
	_ "github.com/caddyserver/caddy/v2/modules/standard"      // reverse_proxy and the stock policies

	"github.com/prefixcache/caddy-prefixcache/caddymodule"      // lb_policy prefix_cache
	_ "github.com/prefixcache/caddy-prefixcache/edgesync/redis" // its sync transport
)

// Response headers that AdaptCaddyfile adds to every reverse_proxy
// handler, read by the client to attribute each request to an upstream.
// The shipped Caddyfiles never send them to clients (a client that reads
// the routing reason learns which prefixes other clients sent); the
// benchmark's client is the operator.
const (
	UpstreamHeader = "X-Upstream"
	ReasonHeader   = "X-Prefix-Cache"
)

// Proxy is a Caddy running in this process. Caddy's configuration is
// process-wide, so at most one Proxy runs at a time.
type Proxy struct {
	// URL is the proxy's base URL, e.g. "http://127.0.0.1:41234".
	URL string
}

// StartProxy loads a Caddy configuration built from caddyfile, whose
// {$LISTEN} and {$UPSTREAMS} environment placeholders are filled in with a
// free local port and upstreams, and whose reverse_proxy handlers get the
// selection policy p (unless p keeps the Caddyfile's own). prefix_cache's
// prefill_rate is converted from simulated to wall time (timeScale, see
// AdaptCaddyfile). The admin API is disabled and config persistence turned
// off, so that concurrent benchmarks and a developer's own Caddy are not
// disturbed.
func StartProxy(caddyfile []byte, upstreams []string, p Policy, timeScale float64) (*Proxy, error) {
	addrs, err := ReservePorts(1)
	if err != nil {
		return nil, err
	}
	addr := addrs[0]
	cfg, err := AdaptCaddyfile(caddyfile, map[string]string{
		"LISTEN":    addr,
		"UPSTREAMS": strings.Join(upstreams, " "),
	}, p, timeScale)
	if err != nil {
		return nil, err
	}
	if err := caddy.Load(cfg, true); err != nil {
		return nil, fmt.Errorf("loading Caddy config: %w", err)
	}
	return &Proxy{URL: "http://" + addr}, nil
}

// Stop stops Caddy.
func (p *Proxy) Stop() error {
	return caddy.Stop()
}

// AdaptCaddyfile expands the environment placeholders {$NAME} and
// {$NAME:default} of caddyfile whose NAME is in vars (others are left to
// Caddy), adapts it to JSON, sets the selection policy of every
// reverse_proxy handler to p's and makes it answer with the UpstreamHeader
// and ReasonHeader headers, and makes the configuration quiet and
// self-contained: admin API off, no config persistence, error-level logs.
//
// The engines run timeScale wall seconds per simulated second, and
// prefix_cache's prefill_rate (given or default) is a rate in simulated
// time, the engines' own: it is divided by timeScale, so the policy's
// estimate drains as fast as the engines prefill.
func AdaptCaddyfile(caddyfile []byte, vars map[string]string, p Policy, timeScale float64) ([]byte, error) {
	if !(timeScale > 0) {
		return nil, fmt.Errorf("time scale must be positive, got %v", timeScale)
	}
	src := expandVars(caddyfile, vars)
	adapter := caddyconfig.GetAdapter("caddyfile")
	if adapter == nil {
		return nil, errors.New("caddyfile adapter not registered")
	}
	raw, warnings, err := adapter.Adapt(src, map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return nil, fmt.Errorf("adapting Caddyfile: %w", err)
	}
	_ = warnings // formatting hints only

	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("decoding adapted config: %w", err)
	}
	var policy any
	if len(p.Selection) > 0 {
		if err := json.Unmarshal(p.Selection, &policy); err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Name, err)
		}
	}
	n := patchProxies(cfg, policy)
	if n == 0 {
		return nil, errors.New("the Caddyfile has no reverse_proxy handler")
	}
	eachPolicy(cfg, func(name string, policy map[string]any) {
		if name == "prefix_cache" {
			scaleTimes(policy, timeScale)
		}
		scalePeerTime(name, policy, timeScale)
	})
	if p.Usage {
		insertUsage(cfg)
	}
	cfg["admin"] = map[string]any{"disabled": true, "config": map[string]any{"persist": false}}
	cfg["logging"] = map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}}
	return json.Marshal(cfg)
}

// patchProxies sets the selection policy of every reverse_proxy handler
// under v to policy (if not nil), makes each set the UpstreamHeader and
// ReasonHeader response headers (as `header_down` would), and returns how
// many it found.
func patchProxies(v any, policy any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		if v["handler"] == "reverse_proxy" {
			n++
			headers, _ := v["headers"].(map[string]any)
			if headers == nil {
				headers = map[string]any{}
				v["headers"] = headers
			}
			response, _ := headers["response"].(map[string]any)
			if response == nil {
				response = map[string]any{}
				headers["response"] = response
			}
			set, _ := response["set"].(map[string]any)
			if set == nil {
				set = map[string]any{}
				response["set"] = set
			}
			set[UpstreamHeader] = []any{"{http.reverse_proxy.upstream.hostport}"}
			set[ReasonHeader] = []any{"{http.reverse_proxy.prefix_cache.reason}"}
			if policy != nil {
				lb, _ := v["load_balancing"].(map[string]any)
				if lb == nil {
					lb = map[string]any{}
					v["load_balancing"] = lb
				}
				lb["selection_policy"] = policy
			}
		}
		for _, c := range v {
			n += patchProxies(c, policy)
		}
	case []any:
		for _, c := range v {
			n += patchProxies(c, policy)
		}
	}
	return n
}

// eachPolicy calls f on every selection policy's object under v (any
// object with a "policy" name), then walks on into it.
func eachPolicy(v any, f func(name string, p map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		if name, ok := v["policy"].(string); ok {
			f(name, v)
		}
		for _, c := range v {
			eachPolicy(c, f)
		}
	case []any:
		for _, c := range v {
			eachPolicy(c, f)
		}
	}
}

// scaleTimes scales a prefix_cache policy's rates and periods by
// timeScale, so that it runs against the engines' simulated clock as a
// deployment runs against real engines:
//   - prefill_rate is divided by it, its default filled in first;
//   - engine_metrics' scrape interval and timeout are multiplied by it,
//     their defaults filled in first and the interval kept at least
//     10 ms, so that the engines are scraped as often, in their time, as
//     a deployment scrapes real engines;
//   - sync_load_interval is multiplied by it (its 100 ms default first,
//     and at least 10 ms), so that edges report their load as often
//     against the engines' clock; without sync it is unused.
func scaleTimes(p map[string]any, timeScale float64) {
	rate := float64(caddymodule.DefaultPrefillRate)
	if r, ok := p["prefill_rate"].(float64); ok {
		rate = r
	}
	p["prefill_rate"] = int64(math.Round(rate / timeScale))
	if m, ok := p["engine_metrics"].(map[string]any); ok {
		interval := durationOr(m["interval"], time.Duration(caddymodule.DefaultMetricsInterval))
		timeout := durationOr(m["timeout"], min(time.Duration(caddymodule.DefaultMetricsTimeout), interval))
		interval = max(time.Duration(float64(interval)*timeScale), 10*time.Millisecond)
		m["interval"] = int64(interval)
		m["timeout"] = int64(min(max(time.Duration(float64(timeout)*timeScale), time.Millisecond), interval))
	}
	interval := durationOr(p["sync_load_interval"], 100*time.Millisecond)
	p["sync_load_interval"] = int64(max(time.Duration(float64(interval)*timeScale), 10*time.Millisecond))
}

// durationOr reads a Caddy duration from JSON (nanoseconds, or a string
// such as "1s"), or returns def.
func durationOr(v any, def time.Duration) time.Duration {
	switch v := v.(type) {
	case float64:
		return time.Duration(v)
	case string:
		if d, err := caddy.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

// insertUsage puts a prefix_cache_usage handler in front of every
// reverse_proxy handler under v that has none before it.
func insertUsage(v any) {
	switch v := v.(type) {
	case map[string]any:
		if handle, ok := v["handle"].([]any); ok {
			var out []any
			for i, h := range handle {
				hm, _ := h.(map[string]any)
				prev := map[string]any{}
				if i > 0 {
					prev, _ = handle[i-1].(map[string]any)
				}
				if hm != nil && hm["handler"] == "reverse_proxy" && (prev == nil || prev["handler"] != "prefix_cache_usage") {
					out = append(out, map[string]any{"handler": "prefix_cache_usage"})
				}
				out = append(out, h)
			}
			v["handle"] = out
		}
		for _, c := range v {
			insertUsage(c)
		}
	case []any:
		for _, c := range v {
			insertUsage(c)
		}
	}
}

// expandVars replaces {$NAME} and {$NAME:default} for the names in vars,
// as Caddy's Caddyfile lexer does with the process environment.
func expandVars(src []byte, vars map[string]string) []byte {
	var out bytes.Buffer
	for {
		i := bytes.Index(src, []byte("{$"))
		if i < 0 {
			out.Write(src)
			return out.Bytes()
		}
		j := bytes.IndexByte(src[i:], '}')
		if j < 0 {
			out.Write(src)
			return out.Bytes()
		}
		name, _, _ := strings.Cut(string(src[i+2:i+j]), ":")
		val, ok := vars[name]
		out.Write(src[:i])
		if ok {
			out.WriteString(val)
		} else {
			out.Write(src[i : i+j+1])
		}
		src = src[i+j+1:]
	}
}
