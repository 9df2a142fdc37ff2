package peers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDynamoSelectReleasesBlocks(t *testing.T) {
	s := new(DynamoSelection)
	if err := s.Provision(newTestContext(t)); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{}, 1)
	s.released = func() { released <- struct{}{} }
	pool := testPool(2)
	system := strings.Repeat("Dynamo predicts the cache from its own routing. ", 10)

	ctx, cancel := context.WithCancel(context.Background())
	first := s.Select(pool, chatRequest(system, "one").WithContext(ctx), nil)
	// The warm worker wins the next request of the same prefix even with
	// the first still active there: its overlap saves more prefill blocks
	// than the first request's active blocks cost (they are shared).
	ctx2, cancel2 := context.WithCancel(context.Background())
	if got := s.Select(pool, chatRequest(system, "two").WithContext(ctx2), nil); got != first {
		t.Errorf("Select(same prefix) = %s, want the warm %s", got.Dial, first.Dial)
	}
	cancel()
	<-released
	cancel2()
	<-released
	s.mu.Lock()
	defer s.mu.Unlock()
	for w, m := range s.active.refs {
		if len(m) != 0 {
			t.Errorf("worker %d keeps %d active blocks after its requests ended", w, len(m))
		}
	}
}

func TestDynamoSelectUnreadableBody(t *testing.T) {
	s := new(DynamoSelection)
	if err := s.Provision(newTestContext(t)); err != nil {
		t.Fatal(err)
	}
	pool := testPool(2)
	r := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
	if got := s.Select(pool, r, nil); got == nil {
		t.Errorf("Select(GET) = nil, want the least-loaded fallback")
	}
}
