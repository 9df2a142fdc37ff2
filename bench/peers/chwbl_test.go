package peers

import (
	"strconv"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/prefixcache/caddy-prefixcache/caddymodule/dialect"
)

func TestChwblLoadOK(t *testing.T) {
	tests := []struct {
		load, total, n int
		factor         float64
		want           bool
	}{
		{0, 0, 4, 1.25, true},    // nothing in flight
		{5, 5, 4, 1.25, false},   // 6 > 6/4 x 1.25 = 1.875
		{1, 4, 4, 1.25, false},   // 2 > 5/4 x 1.25 = 1.5625
		{0, 3, 4, 1.25, true},    // 1 <= 4/4 x 1.25
		{9, 39, 4, 1.25, true},   // 10 <= 40/4 x 1.25 = 12.5
		{11, 39, 4, 1.25, true},  // 12 <= 12.5
		{12, 39, 4, 1.25, false}, // 13 > 12.5
	}
	for _, tt := range tests {
		if got := chwblLoadOK(tt.load, tt.total, tt.n, tt.factor); got != tt.want {
			t.Errorf("chwblLoadOK(%d, %d, %d, %v) = %v, want %v", tt.load, tt.total, tt.n, tt.factor, got, tt.want)
		}
	}
}

func TestChwblRingPick(t *testing.T) {
	names := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"}
	rg := newChwblRing(names, 256)
	if len(rg.points) != 4*256 {
		t.Fatalf("ring has %d points, want %d", len(rg.points), 4*256)
	}
	key := xxh3.HashString("a conversation opening")
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
		{"home within the bound", func() []int { return []int{3, 3, 3, 3} }, true, "ring"}, // 4 <= 13/4 x 1.25
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
	if got, reason := rg.pick(key, []int{1, 1, 1, 1}, 0.5); got != home || reason != "default" {
		t.Errorf("pick with every endpoint over the bound = %d, %q, want %d, default", got, reason, home)
	}

	// Keys spread over every endpoint.
	seen := map[int]int{}
	for i := range 400 {
		ep, _ := rg.pick(xxh3.HashString("key"+strconv.Itoa(i)), []int{0, 0, 0, 0}, 1.25)
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
