package caddymodule

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"testing"
	"time"
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
// the request's context is done, or, when no retry can ask for the body
// again (keep false), as soon as the transport has taken it (read it all,
// or closed it after reading); never while a reader holds a pin, and never
// when a transport closes it unread (a dial error: the retry reads it). A
// read after the release gets an error, never the recycled bytes.
func TestBodyBufReleasedOnlyWhenDone(t *testing.T) {
	body := bytes.Repeat([]byte(`{"messages":[]}`), 4000) // 60 KB: a few buffers' growth
	for _, tt := range []struct {
		name  string
		keep  bool
		steps string // c: context done, x: Close, r: read it all, h: read half, p/u: pin/unpin
		want  []bool // released after each step
	}{
		{"sent", false, "r", []bool{true}},
		{"dial error, retry sends it", false, "xr", []bool{false, true}},
		{"dial error, then the request ends", false, "xc", []bool{false, true}},
		{"half sent, then closed", false, "hx", []bool{false, true}},
		{"kept: sent, then the request ends", true, "rc", []bool{false, true}},
		{"kept: sent twice", true, "rrc", []bool{false, false, true}},
		{"kept: closed after reading", true, "hxc", []bool{false, false, true}},
		{"the request ends first", true, "c", []bool{true}},
		{"pinned", false, "pru", []bool{false, false, true}},
		{"kept and pinned", true, "pcu", []bool{false, false, true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", io.NopCloser(bytes.NewReader(body)))
			r.ContentLength = int64(len(body))
			skip, read, bb, rb := readBody(r, 1<<20, 1<<40, tt.keep)
			if skip != skipNone || !bytes.Equal(read, body) || bb == nil || rb != r.Body {
				t.Fatalf("readBody() = %v, %d bytes, %p; want the body in a pooled buffer", skip, len(read), bb)
			}
			var replay io.ReadCloser = rb
			for i, step := range tt.steps {
				switch step {
				case 'c':
					bb.markCtxDone() // what peeked.finish calls
				case 'x':
					replay.Close()
				case 'r', 'h':
					if step == 'r' && i > 0 && tt.steps[i-1] == 'r' {
						replay = rb.again() // a retry after the body was sent
					}
					want := body
					if step == 'h' {
						want = body[:len(body)/2]
					}
					got := make([]byte, len(want))
					n, err := io.ReadFull(replay, got)
					if err != nil || !bytes.Equal(got[:n], want) {
						t.Fatalf("reading the body: %d bytes, %v; want the client's %d", n, err, len(want))
					}
					if step == 'r' {
						if n, err := replay.Read(make([]byte, 1)); n != 0 || err != io.EOF {
							t.Fatalf("read past the body = %d, %v; want io.EOF", n, err)
						}
					}
				case 'p':
					if !bb.pin() {
						t.Fatal("pin() of a live buffer = false")
					}
				case 'u':
					bb.unpin()
				}
				if released := bb.isReleased(); released != tt.want[i] {
					t.Fatalf("after %q: released = %v, want %v", tt.steps[:i+1], released, tt.want[i])
				}
			}
			if bb.pin() {
				t.Error("pin() of a released buffer = true")
			}
			if again := rb.again(); again != nil {
				t.Error("again() of a released buffer gave a replay")
			}
			fresh := &replayBody{buf: bb, head: read, whole: true}
			if n, err := fresh.Read(make([]byte, 10)); n != 0 || err != errBodyReleased {
				t.Errorf("Read after release = %d, %v; want 0, %v", n, err, errBodyReleased)
			}
		})
	}
}

// TestBodyBudget: a body declared larger than the budget leaves beside
// the bytes in use is not read, and a chunked body whose next buffer does
// not fit stops being read, its bytes replayed whole, and goes to the
// fallback; allocated bytes never exceed the budget, and in-use bytes go
// back when the body is sent.
func TestBodyBudget(t *testing.T) {
	SettleBodies()
	if held := bodyInUse.Load(); held != 0 {
		t.Fatalf("%d bytes held before the test", held)
	}
	body := bytes.Repeat([]byte(`{"messages":[]}`), 10_000) // 150 KB
	budget := int64(100 << 10 * gcHeadroom())               // 100 KiB of buffers and the collector's headroom for them
	for _, tt := range []struct {
		name     string
		declared bool
		want     skipCause
		read     bool // read some of it
	}{
		{"declared", true, skipBudget, false},
		{"chunked", false, skipBudget, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client := &closeRecorder{Reader: bytes.NewReader(body)}
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.Body = client
			r.ContentLength = -1
			if tt.declared {
				r.ContentLength = int64(len(body))
			}
			skip, _, _, rb := readBody(r, 1<<20, budget, false)
			if skip != tt.want {
				t.Fatalf("readBody() skip = %v, want %v", skip, tt.want)
			}
			if held := bodyAllocated.Load(); held > budget {
				t.Errorf("%d bytes allocated, more than the budget %d", held, budget)
			}
			if tt.read != (rb != nil && rb.buf != nil) {
				t.Errorf("read some of the body = %v, want %v", rb != nil, tt.read)
			}
			got, err := io.ReadAll(r.Body)
			if err != nil || !bytes.Equal(got, body) {
				t.Errorf("body given back = %d bytes, %v; want the client's %d", len(got), err, len(body))
			}
			if held := bodyInUse.Load(); held != 0 {
				t.Errorf("%d bytes in use after the body was sent, want 0", held)
			}
		})
	}
	// Within the budget, the body is read and its buffer in use until
	// it goes back. (The pools may hold what the cases above left, and
	// under the race detector sync.Pool drops buffers on purpose, which
	// stay allocated until collected.)
	SettleBodies()
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", io.NopCloser(bytes.NewReader(body[:40<<10])))
	r.ContentLength = 40 << 10
	skip, _, bb, rb := readBody(r, 1<<20, budget, true)
	if skip != skipNone {
		if rb != nil && rb.buf != nil {
			rb.buf.markCtxDone()
		}
		t.Fatalf("readBody() of 40 KiB under a budget of 100 KiB of buffers: skip %v", skip)
	}
	if held := bodyInUse.Load(); held != int64(cap(bb.b)) || held < 40<<10 {
		t.Errorf("%d bytes in use, want the buffer's capacity %d", held, cap(bb.b))
	}
	bb.markCtxDone()
	if held := bodyInUse.Load(); held != 0 {
		t.Errorf("%d bytes in use after the release, want 0", held)
	}
}

// SetBodyReleasedHook sets the hook bodypool.go calls for each buffer
// that goes back to its pool, for the external tests, and returns a
// function that removes it.
func SetBodyReleasedHook(f func(class int)) (restore func()) {
	bodyReleased.Store(&f)
	return func() { bodyReleased.Store(nil) }
}

// Buffers that went back to the pools stop counting against the budget
// soon after the requests that held them end, even in a process where
// nothing else makes the collector run (an idle Caddy collects every two
// minutes; here the collector's pacing is off): the budget asks for the
// collection itself.
func TestIdleBuffersStopCounting(t *testing.T) {
	SettleBodies()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	budget := int64(1 << 20 * gcHeadroom()) // 1 MiB of buffers
	var held []*bodyBuf
	for bb := getBodyBuf(64<<10, budget); bb != nil; bb = getBodyBuf(64<<10, budget) {
		held = append(held, bb)
	}
	if len(held) < 8 {
		t.Fatalf("%d buffers of 64 KiB fit a budget of 1 MiB of buffers, want at least 8", len(held))
	}
	for _, bb := range held {
		bb.markCtxDone()
	}
	if got := bodyInUse.Load(); got != 0 {
		t.Fatalf("%d bytes in use after every request ended", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !fits(bodyAllocated.Load()+512<<10, budget) {
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the requests ended, %d bytes of idle buffers still count against the budget", bodyAllocated.Load())
		}
		time.Sleep(10 * time.Millisecond) // polling the count: the runtime's cleanups signal nothing
	}
	if b := getBodyBuf(512<<10, budget); b == nil {
		t.Error("a buffer of 512 KiB does not fit once the idle buffers were collected")
	} else {
		b.markCtxDone()
	}
}
