package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// apiKey is the key every load request carries in its Authorization
// header: Caddyfile.example's prefix_cache takes its tenant from it, and
// sends a request without one to the fallback policy unread.
const apiKey = "Bearer sk-membench"

// shippedConfig is the JSON config of the Caddyfile at path (one with
// {$LISTEN}, {$UPSTREAMS} and {$BIND}, as Caddyfile.example), adapted by
// the Caddy binary bin itself (`caddy adapt`), serving on site (host:port)
// in front of upstreams, with three changes: the admin API listens on
// admin, without persisting the config, so that membench reads the
// metrics of this Caddy and of no other; the selection policy of every
// reverse_proxy is policy's, unless policy is prefix_cache, whose block
// the Caddyfile gives (then policy's other fields, a body_budget, are
// set in it); and nothing else. The site's options (timeouts, retries,
// health checks, access log) are the Caddyfile's.
func shippedConfig(bin, dir, path, site, admin string, upstreams []string, policy map[string]any) ([]byte, error) {
	cmd := exec.Command(bin, "adapt", "--config", path, "--adapter", "caddyfile")
	abs, _ := filepath.Abs(dir)
	cmd.Env = append(os.Environ(),
		"HOME="+abs, "XDG_DATA_HOME="+abs, "XDG_CONFIG_HOME="+abs,
		"LISTEN="+site, "UPSTREAMS="+strings.Join(upstreams, " "), "BIND=127.0.0.1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("caddy adapt %s: %w: %s", path, err, stderr.Bytes())
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		return nil, fmt.Errorf("decoding the adapted %s: %w", path, err)
	}
	n, err := setPolicy(cfg, policy)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("%s has no reverse_proxy", path)
	}
	cfg["admin"] = map[string]any{"listen": admin, "config": map[string]any{"persist": false}}
	return json.Marshal(cfg)
}

// setPolicy sets the selection policy of every reverse_proxy handler
// under v as shippedConfig says, and returns how many it found.
func setPolicy(v any, policy map[string]any) (int, error) {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		if v["handler"] == "reverse_proxy" {
			n++
			lb, _ := v["load_balancing"].(map[string]any)
			if lb == nil {
				lb = map[string]any{}
				v["load_balancing"] = lb
			}
			if policy["policy"] != "prefix_cache" {
				lb["selection_policy"] = policy
			} else {
				sel, _ := lb["selection_policy"].(map[string]any)
				if sel == nil || sel["policy"] != "prefix_cache" {
					return n, fmt.Errorf("a reverse_proxy's lb_policy is %v, not prefix_cache", sel["policy"])
				}
				for k, x := range policy {
					sel[k] = x
				}
			}
		}
		for _, c := range v {
			k, err := setPolicy(c, policy)
			n += k
			if err != nil {
				return n, err
			}
		}
	case []any:
		for _, c := range v {
			k, err := setPolicy(c, policy)
			n += k
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}
