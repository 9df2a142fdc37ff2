package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// engines are simulated engines for memory, not for routing: each reads
// the whole prompt, then streams an SSE answer for a fixed time, a token
// every tick, or, in flood mode, as many bytes as it can.
type engines struct {
	addrs   []string
	servers []*http.Server
	stream  time.Duration
	tick    time.Duration
	flood   atomic.Int64 // bytes each answer writes as fast as it can; 0: stream tokens
}

func startEngines(n int, stream time.Duration) (*engines, error) {
	e := &engines{stream: stream, tick: 250 * time.Millisecond}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: http.HandlerFunc(e.serve)}
		go srv.Serve(ln)
		e.addrs = append(e.addrs, ln.Addr().String())
		e.servers = append(e.servers, srv)
	}
	return e, nil
}

func (e *engines) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusOK)
		return
	}
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flush := w.(http.Flusher)
	if n := e.flood.Load(); n > 0 {
		chunk := bytes.Repeat([]byte("data: flood\n\n"), 4096)
		for sent := int64(0); sent < n; sent += int64(len(chunk)) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		return
	}
	end := time.Now().Add(e.stream)
	for time.Now().Before(end) {
		if _, err := fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\" tok\"}}]}\n\n"); err != nil {
			return
		}
		flush.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-time.After(e.tick): // the engine's decode pace: the workload, not synchronisation
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (e *engines) close() {
	for _, s := range e.servers {
		s.Close()
	}
}

// prompts returns k distinct chat bodies of about size bytes each.
func prompts(size, k int) [][]byte {
	r := rand.New(rand.NewPCG(uint64(size), 7))
	var out [][]byte
	for i := range k {
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"model":"bench","stream":true,"messages":[{"role":"system","content":"agent %d context:`, i)
		for sb.Len() < size-64 {
			fmt.Fprintf(&sb, " w%d", r.IntN(100000))
		}
		sb.WriteString(`"},{"role":"user","content":"go on"}]}`)
		out = append(out, []byte(sb.String()))
	}
	return out
}

// client is an HTTP/1.1 client with a connection per concurrent request.
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 4096,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	}}
}

// h2cClient is an HTTP/2 client without TLS (prior knowledge): all its
// requests share one connection, as streams.
func h2cClient() *http.Client {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: protocols, DisableCompression: true}}
}

// burst sends n requests at once, body i%len(bodies) each, reads every
// answer to its end, and returns the errors. headers, if not nil, is
// closed once every request has its response headers (every upload is
// done, and the answers stream).
func burst(ctx context.Context, c *http.Client, url string, n int, bodies [][]byte, headers chan<- struct{}, errs *errTally) {
	var wg sync.WaitGroup
	var answered atomic.Int64
	start := make(chan struct{})
	answer := func() {
		if answered.Add(1) == int64(n) && headers != nil {
			close(headers)
		}
	}
	for i := range n {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", apiKey)
			resp, err := c.Do(req)
			answer()
			errs.response(resp, err)
		})
	}
	close(start)
	wg.Wait()
}

// steady keeps n requests streaming at once, as n clients that each
// send their next request when their answer ends: client i first sends
// at i x stream/n, so uploads are spread over time as in a running
// service, and every client keeps sending until dur has passed since the
// start. It returns the requests sent.
func steady(ctx context.Context, c *http.Client, url string, n int, stream, dur time.Duration, bodies [][]byte, errs *errTally) (sent int) {
	var wg sync.WaitGroup
	var nsent atomic.Int64
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			// The client's place in the stagger: the scenario, not synchronisation.
			time.Sleep(time.Duration(i) * stream / time.Duration(n))
			for k := 0; time.Since(start) < dur; k++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[(i+k)%len(bodies)]))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", apiKey)
				nsent.Add(1)
				resp, err := c.Do(req)
				errs.response(resp, err)
			}
		})
	}
	wg.Wait()
	return int(nsent.Load())
}

// errTally counts failed requests by what failed: a status, a transport
// error or a broken answer, each kind by its first text.
type errTally struct {
	mu    sync.Mutex
	n     int
	kinds map[string]int
}

// response drains and closes resp (if any) and counts it if it failed.
func (t *errTally) response(resp *http.Response, err error) {
	var kind string
	switch {
	case err != nil:
		kind = "request: " + err.Error()
	default:
		derr := drain(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode != http.StatusOK:
			kind = "status " + resp.Status
		case derr != nil:
			kind = "answer: " + derr.Error()
		default:
			return
		}
	}
	// Addresses and ports differ per connection: keep the kinds few.
	if len(kind) > 120 {
		kind = kind[:120]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	if t.kinds == nil {
		t.kinds = map[string]int{}
	}
	if len(t.kinds) < 8 {
		t.kinds[kind]++
	} else {
		t.kinds["other"]++
	}
}

// probe sends n small chat requests one after another and returns their
// latencies' p50 and p99: what an ordinary client sees meanwhile.
func probe(c *http.Client, url string, n int) (p50, p99 time.Duration, errors int) {
	body := []byte(`{"model":"bench","messages":[{"role":"user","content":"a short question"}]}`)
	var lat []time.Duration
	for range n {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", apiKey)
		resp, err := c.Do(req)
		if err != nil {
			errors++
			continue
		}
		// The first event is what a user waits for.
		buf := make([]byte, 1)
		_, err = resp.Body.Read(buf)
		lat = append(lat, time.Since(start))
		resp.Body.Close()
		if err != nil && err != io.EOF {
			errors++
		}
	}
	if len(lat) == 0 {
		return 0, 0, errors
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], errors
}
