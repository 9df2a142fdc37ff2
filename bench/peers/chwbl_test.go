package peers

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/dialect"
)

// TestChwblLoadOK's cases are KubeAI's bound evaluated by hand (load <=
// (total+1)/n x factor), and SMG's prefix_hash.rs test_load_ok case (30
// of 100 over 4 workers at 1.25: 30 <= 31.25).
func TestChwblLoadOK(t *testing.T) {
	tests := []struct {
		load, total, n int
		factor         float64
		want           bool
	}{
		{0, 0, 4, 1.25, true},    // nothing in flight
		{30, 100, 4, 1.25, true}, // SMG: 30 <= 101/4 x 1.25 = 31.5625
		{1, 4, 4, 1.25, true},    // 1 <= 5/4 x 1.25 = 1.5625 (the old load+1 rule said no)
		{2, 4, 4, 1.25, false},   // 2 > 1.5625
		{2, 16, 8, 1.25, true},   // issue 16: 8 engines, 16 in flight: two each
		{3, 16, 8, 1.25, false},  // 3 > 17/8 x 1.25 = 2.65625
		{12, 39, 4, 1.25, true},  // 12 <= 12.5
		{13, 39, 4, 1.25, false}, // 13 > 12.5
		{33, 43, 2, 1.5, true},   // KubeAI's test table: 33 <= 44/2 x 1.5 = 33
		{34, 44, 2, 1.5, false},  // 34 > 33.75
	}
	for _, tt := range tests {
		if got := chwblLoadOK(tt.load, tt.total, tt.n, tt.factor); got != tt.want {
			t.Errorf("chwblLoadOK(%d, %d, %d, %v) = %v, want %v", tt.load, tt.total, tt.n, tt.factor, got, tt.want)
		}
	}
}

// TestChwblUpstreamPrefixHashSteps replays the "prefix hash strategy" case
// of KubeAI's TestLoadBalancingStrategies (substratusai/kubeai at
// 2f32ef498da629f96fd417ddfaaf22c28d40787e,
// internal/loadbalancer/load_balancer_test.go): two endpoints with one
// ring point each (replication 1), 10 requests in flight on each, mean
// load factor 1.5, and prefixes equal to an endpoint's ring input
// ("pod-a-1" + "0"), so the key lands on that endpoint's point. The
// expected counts are upstream's.
func TestChwblUpstreamPrefixHashSteps(t *testing.T) {
	names := []string{"pod-a-1", "pod-a-2"}
	rg := newChwblRing(names, 1)
	loads := []int{10, 10}
	steps := []struct {
		name     string
		prefix   string
		requests int
		want     []int // requests per endpoint
	}{
		{"first request to model-a, preferring pod-a-1", "pod-a-10", 1, []int{1, 0}},
		{"20 more requests preferring pod-a-1", "pod-a-10", 20, []int{20, 0}},
		{"4 more requests preferring pod-a-1", "pod-a-10", 4, []int{3, 1}},
		{"with pod-a-1 near max load, requests preferring pod-a-2", "pod-a-20", 20, []int{0, 20}},
	}
	for _, st := range steps {
		got := make([]int, len(names))
		for range st.requests {
			ep, _ := rg.pick(chwblKey([]byte(st.prefix)), loads, 1.5)
			got[ep]++
			loads[ep]++ // requests stay in flight, as upstream's test keeps them
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("%s: requests per endpoint %v, want %v (KubeAI's test)", st.name, got, st.want)
		}
	}
}

func TestChwblRingPick(t *testing.T) {
	names := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"}
	rg := newChwblRing(names, 256)
	if len(rg.points) != 4*256 {
		t.Fatalf("ring has %d points, want %d", len(rg.points), 4*256)
	}
	key := chwblKey([]byte("a conversation opening"))
	home, reason := rg.pick(key, []int{0, 0, 0, 0}, 1.25)
	if reason != "ring" {
		t.Fatalf("pick with no load = %d, %q, want reason ring", home, reason)
	}

	tests := []struct {
		name       string
		loads      func() []int
		wantHome   bool
		wantReason string
	}{
		{"idle", func() []int { return []int{0, 0, 0, 0} }, true, "ring"},
		{"home within the bound", func() []int { return []int{3, 3, 3, 3} }, true, "ring"},                              // 3 <= 13/4 x 1.25
		{"home one over the mean walks", func() []int { l := []int{1, 1, 1, 1}; l[home] = 2; return l }, false, "walk"}, // 2 > 6/4 x 1.25
		{"home over the bound walks", func() []int { l := []int{1, 1, 1, 1}; l[home] = 6; return l }, false, "walk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loads := tt.loads()
			got, reason := rg.pick(key, loads, 1.25)
			if (got == home) != tt.wantHome || reason != tt.wantReason {
				t.Errorf("pick(loads %v) = %d, %q, want home(%d) %v, %q", loads, got, reason, home, tt.wantHome, tt.wantReason)
			}
		})
	}

	// With a factor below 1 no endpoint is ever within the bound: the
	// first met is the default.
	if got, reason := rg.pick(key, []int{2, 2, 2, 2}, 0.5); got != home || reason != "default" {
		t.Errorf("pick with every endpoint over the bound = %d, %q, want %d, default", got, reason, home)
	}

	// Keys spread over every endpoint.
	seen := map[int]int{}
	for i := range 400 {
		ep, _ := rg.pick(chwblKey([]byte("key"+strconv.Itoa(i))), []int{0, 0, 0, 0}, 1.25)
		seen[ep]++
	}
	for ep := range names {
		if seen[ep] < 50 {
			t.Errorf("endpoint %d got %d of 400 keys, want a fair share (%v)", ep, seen[ep], seen)
		}
	}
}

func TestKubeAIPrefix(t *testing.T) {
	long := strings.Repeat("é", 150)
	tests := []struct {
		name string
		body string
		n    int
		want string
	}{
		{"first user message", `{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"Hello there"},{"role":"assistant","content":"Hi"},{"role":"user","content":"again"}]}`, 100, "Hello there"},
		{"truncated in characters", `{"messages":[{"role":"user","content":"` + long + `"}]}`, 100, strings.Repeat("é", 100)},
		{"text parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`, 100, "a\nb"},
		{"no user message", `{"messages":[{"role":"system","content":"sys"}]}`, 100, ""},
		{"completions", `{"prompt":"Once upon a time"}`, 4, "Once"},
		{"completions batch", `{"prompt":["first","second"]}`, 100, "first"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text, req, err := dialect.Append(nil, []byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := kubeAIPrefix(text, req.Kind, tt.n); string(got) != tt.want {
				t.Errorf("kubeAIPrefix(%s, %d) = %q, want %q", tt.body, tt.n, got, tt.want)
			}
		})
	}
}
