package peers

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() {
	caddy.RegisterModule(new(KubeAISelection))
}

// Defaults of KubeAI's PrefixHash load balancing (api/k8s/v1
// model_types.go: +kubebuilder:default markers).
const (
	// KubeAIPrefixCharLength is how many characters of the prompt's first
	// user message are hashed.
	KubeAIPrefixCharLength = 100

	// KubeAIMeanLoadFactor: an endpoint may carry up to 1.25 x the mean
	// in-flight load (KubeAI's meanLoadFactor 125, in percent).
	KubeAIMeanLoadFactor = 1.25

	// KubeAIReplication is the number of points of each endpoint on the
	// hash ring.
	KubeAIReplication = 256
)

// KubeAISelection is KubeAI's PrefixHash strategy, read from
// github.com/substratusai/kubeai at 2f32ef498da629f96fd417ddfaaf22c28d40787e
// (internal/loadbalancer/balance_chwbl.go chwblGetAddr and chwblLoadOK,
// group.go getBestAddr, api/openai/v1/chat_completions.go Prefix,
// api/k8s/v1/model_types.go PrefixHash defaults): consistent hashing with
// bounded loads of the first prefix_char_length (100) characters of the
// first user message, on a ring of replication (256) xxHash64 points per
// endpoint; walking clockwise from the key's point, the first endpoint
// whose in-flight load <= mean_load_factor (1.25) x (total in flight + 1)
// / endpoints takes the request, else the first endpoint met. SMG's
// prefix_hash policy (lightseekorg/smg at 73da68ca9472bbc0ff5f63d31a8a21fbb8696359,
// model_gateway/src/policies/prefix_hash.rs load_ok) has the same bound.
//
// Deviations: no LoRA adapter in the key (the benchmark uses none); the
// message text comes from the routing text, so text parts are joined with
// "\n" (KubeAI joins them with nothing; the benchmark sends strings);
// endpoints are named by their Dial on the ring (KubeAI: by pod name);
// loads are Caddy's in-flight counts of this Caddy (KubeAI: its own, the
// same thing).
type KubeAISelection struct {
	// Characters of the first user message that are hashed. Default: `100`.
	PrefixCharLength int `json:"prefix_char_length,omitempty"`

	// An endpoint takes a request while its in-flight load is at most this
	// factor times the mean with the request counted. Default: `1.25`.
	MeanLoadFactor float64 `json:"mean_load_factor,omitempty"`

	// Points of each endpoint on the hash ring. Default: `256`.
	Replication int `json:"replication,omitempty"`

	mu   sync.Mutex
	key  string // the Dials the ring was built for
	ring chwblRing
	intn func(int) int
}

// CaddyModule returns the Caddy module information.
func (*KubeAISelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.peer_kubeai",
		New: func() caddy.Module { return new(KubeAISelection) },
	}
}

// Provision sets defaults.
func (s *KubeAISelection) Provision(caddy.Context) error {
	if s.PrefixCharLength == 0 {
		s.PrefixCharLength = KubeAIPrefixCharLength
	}
	if s.MeanLoadFactor == 0 {
		s.MeanLoadFactor = KubeAIMeanLoadFactor
	}
	if s.Replication == 0 {
		s.Replication = KubeAIReplication
	}
	s.intn = defaultIntn
	return s.Validate()
}

// Validate checks the configuration.
func (s *KubeAISelection) Validate() error {
	switch {
	case s.PrefixCharLength < 1:
		return fmt.Errorf("prefix_char_length must be positive, got %d", s.PrefixCharLength)
	case s.MeanLoadFactor < 1:
		return fmt.Errorf("mean_load_factor must be at least 1, got %v", s.MeanLoadFactor)
	case s.Replication < 1:
		return fmt.Errorf("replication must be positive, got %d", s.Replication)
	}
	return nil
}

// Select hashes the request's prefix onto the ring of available upstreams
// and walks it to the first one under the load bound.
func (s *KubeAISelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, _ http.ResponseWriter) *reverseproxy.Upstream {
	req := routingText(r)
	if !req.ok {
		setReason(r, "fallback")
		return leastConn(pool, s.intn)
	}
	avail := available(pool)
	if len(avail) == 0 {
		return nil
	}
	loads := make([]int, len(avail))
	names := make([]string, len(avail))
	for j, i := range avail {
		loads[j] = pool[i].NumRequests()
		names[j] = pool[i].Dial
	}
	key := chwblKey(kubeAIPrefix(req.text, req.kind, s.PrefixCharLength))
	s.mu.Lock()
	if ringKey := strings.Join(names, " "); ringKey != s.key {
		s.key = ringKey
		s.ring = newChwblRing(names, s.Replication)
	}
	ring := s.ring
	s.mu.Unlock()
	j, reason := ring.pick(key, loads, s.MeanLoadFactor)
	setReason(r, reason)
	return pool[avail[j]]
}

// Interface guards
var (
	_ caddy.Provisioner     = (*KubeAISelection)(nil)
	_ caddy.Validator       = (*KubeAISelection)(nil)
	_ reverseproxy.Selector = (*KubeAISelection)(nil)
)
