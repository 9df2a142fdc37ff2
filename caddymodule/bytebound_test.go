package caddymodule_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// holdStreams makes every backend answer a streamed request ("stream":true)
// with one event, then hold the stream open until release is closed or the
// client goes away; other requests get the usual JSON answer.
func holdStreams(bs []*backend, release <-chan struct{}) {
	for _, b := range bs {
		b.handle = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			if !bytes.Contains(body, []byte(`"stream":true`)) {
				return false
			}
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("X-Backend", b.name)
			fmt.Fprint(w, "data: {}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return true
		}
	}
}

// openStream posts body with "stream":true added and returns the response
// once its first event has arrived: the request is then in flight at the
// backend, and counted by Caddy and the policy.
func openStream(t *testing.T, url string, body []byte) *http.Response {
	t.Helper()
	body = append(body[:len(body)-1:len(body)-1], []byte(`,"stream":true}`)...)
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data:") {
		t.Fatalf("first line of stream %q, %v", line, err)
	}
	return resp
}

// inFlightBytes reads each upstream's in_flight_bytes from the admin API.
func inFlightBytes(t *testing.T, admin string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, in := range getStats(t, admin).Instances {
		for _, u := range in.Upstreams {
			out[u.Dial] += u.InFlightBytes
		}
	}
	return out
}

// Long contexts spill by the bytes they hold in flight, long before the
// request bound would move them: with a request allowance of 100 and a
// byte allowance of 24 KiB (and min_match_ratio off: the shared prompt is a
// small part of each), the home backend of a shared system prompt
// takes streams of ~10 KiB of prompt while the bytes it already holds are
// within ceil((sum + size) / 2) + 24 KiB, and the next one spills. The
// admin API shows the bytes in flight, and they are given back when the
// streams end. choice rules: under the cost, the prefill the held
// streams left queued at home would move a stream before the bound does.
func TestLongContextsSpillByBytes(t *testing.T) {
	bs := newBackends(t, 2)
	release := make(chan struct{})
	holdStreams(bs, release)
	port := freePort(t)
	const allowanceBytes = 24 << 10
	admin := startCaddyAdmin(t, proxySite(port, bs,
		"header_down X-Prompt-Bytes {http.reverse_proxy.prefix_cache.prompt_bytes}",
		fmt.Sprintf("choice rules\n\t\t\tload_factor 1\n\t\t\tload_allowance 100\n\t\t\tload_allowance_bytes %d\n\t\t\tmin_match_ratio 0", allowanceBytes)))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	dial := map[string]string{bs[0].name: bs[0].addr(), bs[1].name: bs[1].addr()}

	system := words("shared", 300)
	home, _ := post(t, http.DefaultClient, url, chat(system, "warm up"))

	var open []*http.Response
	closeAll := func() {
		for _, r := range open {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		open = nil
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
		closeAll()
	}()

	held := map[string]int64{} // prompt bytes in flight, by backend name
	spilled := -1
	for i := range 8 {
		resp := openStream(t, url, chat(system, words(fmt.Sprintf("task %d", i), 1500)))
		open = append(open, resp)
		got := resp.Header.Get("X-Backend")
		size, err := strconv.ParseInt(resp.Header.Get("X-Prompt-Bytes"), 10, 64)
		if err != nil || size < 8<<10 {
			t.Fatalf("stream %d: prompt bytes %q (%v), want a long prompt", i, resp.Header.Get("X-Prompt-Bytes"), err)
		}
		bound := (held[bs[0].name]+held[bs[1].name]+size+1)/2 + allowanceBytes
		if spilled < 0 {
			// Only home holds the prefix until the first spill.
			want := home
			if held[home] > bound {
				want = otherThan(bs, home)
			}
			if got != want {
				t.Fatalf("stream %d went to %s (held %v, size %d, byte bound %d), want %s", i, got, held, size, bound, want)
			}
			if got != home {
				spilled = i
			}
		}
		held[got] += size
		if ib := inFlightBytes(t, admin); ib[dial[got]] != held[got] {
			t.Fatalf("after stream %d the admin API shows %v bytes in flight, want %s: %d", i, ib, got, held[got])
		}
	}
	if spilled < 0 {
		t.Fatalf("no stream spilled from %s holding %v bytes", home, held)
	}
	m := scrape(t, admin, "caddy_prefix_cache_upstream_in_flight_bytes")
	for _, b := range bs {
		series := `caddy_prefix_cache_upstream_in_flight_bytes{upstream="` + b.addr() + `"}`
		if got, ok := m[series]; !ok || got != float64(held[b.name]) {
			t.Errorf("metric %s = %v (present %v), want %d", series, got, ok, held[b.name])
		}
	}
	t.Logf("first spill at stream %d", spilled)

	close(release)
	closeAll()
	// The bytes are given back when each request's handler returns, after
	// its response has ended: wait for that, with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ib := inFlightBytes(t, admin)
		if ib[dial[bs[0].name]] == 0 && ib[dial[bs[1].name]] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bytes still in flight after every stream ended: %v", ib)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
