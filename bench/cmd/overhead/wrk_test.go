package main

import (
	"testing"
	"time"
)

// wrkOutput is wrk 4.1's report with --latency, as the command reads it.
const wrkOutput = `Running 1s test @ http://127.0.0.1:18800/v1/chat/completions
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     4.12ms    2.01ms  15.11ms   80.00%
    Req/Sec     3.60k   200.00     3.90k    70.00%
  Latency Distribution
     50%    3.68ms
     75%    4.50ms
     90%    6.00ms
     99%   15.11ms
  3566 requests in 1.00s, 1.20MB read
  Socket errors: connect 0, read 1, write 0, timeout 2
  Non-2xx or 3xx responses: 4
Requests/sec:   3566.00
Transfer/sec:      1.20MB
`

func TestParseWrk(t *testing.T) {
	got, err := parseWrk(wrkOutput)
	if err != nil {
		t.Fatalf("parseWrk: %v", err)
	}
	want := result{reqs: 3566, p50: 3680 * time.Microsecond, p99: 15110 * time.Microsecond, requests: 3566, errors: 7}
	if got != want {
		t.Errorf("parseWrk = %+v, want %+v", got, want)
	}
	if _, err := parseWrk("Running 1s test\n"); err == nil {
		t.Error("parseWrk of a report without figures: no error")
	}
}

func TestParseSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
	}{
		{"2KB", 2 << 10},
		{" 256kb", 256 << 10},
		{"1MB", 1 << 20},
		{"512", 512},
	} {
		if got, err := parseSize(tt.in); err != nil || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v, want %d", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "0KB", "-1", "2GB", "KB"} {
		if got, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", bad, got)
		}
	}
}
