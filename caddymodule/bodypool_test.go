package caddymodule

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestClassOf(t *testing.T) {
	sizes := []int{1, 4095, 4096, 4097, 5119, 5120, 5121, 32 << 10, 32<<10 + 1, 33615, 263648, 1<<20 + 1, 4<<20 + 1, 16 << 20}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		sizes = append(sizes, 1+r.IntN(16<<20))
	}
	for _, n := range sizes {
		c := classOf(n)
		if c < 0 || c >= numClasses {
			t.Fatalf("classOf(%d) = %d, want a class in [0, %d)", n, c, numClasses)
		}
		if classSize(c) < n {
			t.Errorf("classOf(%d) = %d of size %d, too small", n, c, classSize(c))
		}
		if c > 0 && classSize(c-1) >= n {
			t.Errorf("classOf(%d) = %d, but class %d (size %d) holds it", n, c, c-1, classSize(c-1))
		}
		if classSize(c) > n && 4*(classSize(c)-n) > classSize(c) && n > 4096 {
			t.Errorf("classOf(%d): size %d wastes more than a quarter", n, classSize(c))
		}
	}
	if c := classOf(16<<20 + 1); c != -1 {
		t.Errorf("classOf(16 MiB + 1) = %d, want -1 (not pooled)", c)
	}
}

// TestBodyBufReleasedOnlyWhenDone: the buffer goes back to its pool when
// the request's context is done and the body was closed or replayed, in
// either order, and not while a reader holds a pin. A read after the
// release gets an error, never the recycled bytes.
func TestBodyBufReleasedOnlyWhenDone(t *testing.T) {
	body := bytes.Repeat([]byte(`{"messages":[]}`), 4000) // 60 KB: past firstRead
	for _, tt := range []struct {
		name  string
		steps string // c: context done, x: Close, r: read it all, p/u: pin/unpin
		want  []bool // released after each step
	}{
		{"cancel then close", "cx", []bool{false, true}},
		{"close then cancel", "xc", []bool{false, true}},
		{"replay then cancel", "rc", []bool{false, true}},
		{"cancel then replay", "cr", []bool{false, true}},
		{"close, retry reads it, cancel", "xrc", []bool{false, false, true}},
		{"pinned", "pcxu", []bool{false, false, false, true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &PrefixCacheSelection{MaxBody: 1 << 20}
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", io.NopCloser(bytes.NewReader(body)))
			r.ContentLength = int64(len(body))
			skip, read, bb := s.readBody(r)
			if skip != skipNone || !bytes.Equal(read, body) || bb == nil {
				t.Fatalf("readBody() = %v, %d bytes, %p; want the body in a pooled buffer", skip, len(read), bb)
			}
			rb := r.Body.(*replayBody)
			for i, step := range tt.steps {
				switch step {
				case 'c':
					bb.markCtxDone() // what context.AfterFunc calls
				case 'x':
					rb.Close()
				case 'r':
					got, err := io.ReadAll(rb)
					if err != nil || !bytes.Equal(got, body) {
						t.Fatalf("reading the body: %d bytes, %v; want the client's %d", len(got), err, len(body))
					}
				case 'p':
					if !bb.pin() {
						t.Fatal("pin() of a live buffer = false")
					}
				case 'u':
					bb.unpin()
				}
				bb.mu.Lock()
				released := bb.released
				bb.mu.Unlock()
				if released != tt.want[i] {
					t.Fatalf("after %q: released = %v, want %v", tt.steps[:i+1], released, tt.want[i])
				}
			}
			if bb.pin() {
				t.Error("pin() of a released buffer = true")
			}
			if !strings.Contains(tt.steps, "r") {
				if n, err := rb.Read(make([]byte, 10)); n != 0 || err != errBodyReleased {
					t.Errorf("Read after release = %d, %v; want 0, %v", n, err, errBodyReleased)
				}
			}
		})
	}
}

// TestReadBodyReleasesWithContext: readBody arranges the release with the
// request's context (context.AfterFunc), and an empty body's buffer does
// not wait for it.
func TestReadBodyReleasesWithContext(t *testing.T) {
	released := make(chan int, 1)
	hook := func(c int) { released <- c }
	bodyReleased.Store(&hook)
	defer bodyReleased.Store(nil)

	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", io.NopCloser(bytes.NewReader(body)))
	s := &PrefixCacheSelection{MaxBody: 1 << 20}
	_, _, bb := s.readBody(r)
	if _, err := io.ReadAll(r.Body); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-released:
		t.Fatalf("buffer of class %d released before the request's context was done", c)
	default:
	}
	cancel()
	if c := <-released; c != bb.class {
		t.Errorf("released class %d, want %d", c, bb.class)
	}
}

// SetBodyReleasedHook sets the hook bodypool.go calls for each buffer
// that goes back to its pool, for the external tests, and returns a
// function that removes it.
func SetBodyReleasedHook(f func(class int)) (restore func()) {
	bodyReleased.Store(&f)
	return func() { bodyReleased.Store(nil) }
}
