package driver

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// SessionHeader is the request header carrying the workload's conversation
// (or group) ID, for the header-hash policy.
const SessionHeader = "X-Session-ID"

// Policy is a reverse_proxy load-balancing policy under test.
type Policy struct {
	// Name labels the policy in reports.
	Name string `json:"name"`

	// Selection is the selection_policy JSON of reverse_proxy's
	// load_balancing. Empty keeps the policy the Caddyfile configures.
	Selection json.RawMessage `json:"selection,omitempty"`

	// KVEvents starts the engines with KV events on
	// (engine.Config.KVEvents), for a policy that consumes them.
	KVEvents bool `json:"kv_events,omitempty"`

	// Usage puts the prefix_cache_usage handler in front of every
	// reverse_proxy, so that prefix_cache reads the engines' answers.
	Usage bool `json:"usage,omitempty"`
}

// Policies known by name: the prefix_cache entry keeps the Caddyfile's own
// lb_policy block, so the benchmark measures the configuration users see.
var knownPolicies = map[string]Policy{
	"random":       {Name: "random", Selection: json.RawMessage(`{"policy":"random"}`)},
	"round_robin":  {Name: "round_robin", Selection: json.RawMessage(`{"policy":"round_robin"}`)},
	"least_conn":   {Name: "least_conn", Selection: json.RawMessage(`{"policy":"least_conn"}`)},
	"header":       {Name: "header", Selection: json.RawMessage(`{"policy":"header","field":"` + SessionHeader + `"}`)},
	"prefix_cache": {Name: "prefix_cache"},
}

// DefaultPolicyNames are the policies a benchmark compares by default.
var DefaultPolicyNames = []string{"random", "round_robin", "least_conn", "header", "prefix_cache"}

// ParsePolicies returns the policies named in a comma-separated list:
// random, round_robin, least_conn, header (hash of the session header),
// prefix_cache, and the peers of bench/peers (see peers.go).
func ParsePolicies(list string) ([]Policy, error) {
	var ps []Policy
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		p, ok := knownPolicies[name]
		if !ok {
			known := make([]string, 0, len(knownPolicies))
			for k := range knownPolicies {
				known = append(known, k)
			}
			slices.Sort(known)
			return nil, fmt.Errorf("unknown policy %q (known: %s)", name, strings.Join(known, ", "))
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("no policy in %q", list)
	}
	return ps, nil
}

// ParseCustomPolicy parses "name=JSON", a policy named name whose
// selection_policy is the JSON object, e.g.
// `prefix_cache_4k={"policy":"prefix_cache","min_match":4096}`.
func ParseCustomPolicy(s string) (Policy, error) {
	name, raw, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(name) == "" {
		return Policy{}, fmt.Errorf("custom policy %q is not name=JSON", s)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return Policy{}, fmt.Errorf("custom policy %s: %w", name, err)
	}
	policy, ok := v["policy"].(string)
	if !ok {
		return Policy{}, fmt.Errorf("custom policy %s: the JSON needs a \"policy\" name", name)
	}
	return Policy{Name: strings.TrimSpace(name), Selection: json.RawMessage(raw), KVEvents: kvEventPolicies[policy]}, nil
}
