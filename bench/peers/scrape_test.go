package peers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const engineMetricsText = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="sim",engine="0"} 7
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="sim model",engine="0"} 3
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="sim",engine="0"} 0.25 1700000000000
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",num_cpu_blocks="None",num_gpu_blocks="4096",engine="0"} 1.0
`

func TestParseEngineMetrics(t *testing.T) {
	tests := []struct {
		name string
		text string
		want engineMetrics
	}{
		{"vllm", engineMetricsText, engineMetrics{waiting: 3, kvUsage: 0.25, blockSize: 16, numBlocks: 4096, ok: true}},
		{"cache info only, escaped label", "vllm:cache_config_info{note=\"a \\\"b\\\", c\",num_gpu_blocks=\"25000\",block_size=\"32\"} 1.0\n", engineMetrics{blockSize: 32, numBlocks: 25000, ok: true}},
		{"cache info, bad numbers left out", `vllm:cache_config_info{block_size="None",num_gpu_blocks="x"} 1.0` + "\n", engineMetrics{ok: true}},
		{"no labels, v0 name", "vllm:num_requests_waiting 2\nvllm:gpu_cache_usage_perc 0.5\n", engineMetrics{waiting: 2, kvUsage: 0.5, ok: true}},
		{"absent", "# nothing\nother_metric 1\n", engineMetrics{}},
		{"prefix of a name", "vllm:num_requests_waiting_total 9\n", engineMetrics{}},
		{"garbage value", "vllm:num_requests_waiting{a=\"b\"} NaNx\n", engineMetrics{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEngineMetrics(strings.NewReader(tt.text))
			if err != nil || got != tt.want {
				t.Errorf("parseEngineMetrics(%q) = %+v, %v, want %+v", tt.name, got, err, tt.want)
			}
		})
	}
}

func TestScraper(t *testing.T) {
	var hits atomic.Int32
	second := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(engineMetricsText))
		if hits.Add(1) == 2 {
			close(second)
		}
	}))
	defer srv.Close()
	dial := strings.TrimPrefix(srv.URL, "http://")

	s := newScraper(time.Millisecond)
	s.watch(dial)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	// The second scrape starts after the first one's values are stored.
	<-second
	if got := s.get(dial); got != (engineMetrics{waiting: 3, kvUsage: 0.25, blockSize: 16, numBlocks: 4096, ok: true}) {
		t.Errorf("get(%s) after a scrape = %+v, want waiting 3, usage 0.25", dial, got)
	}
	if got := s.get("127.0.0.1:1"); got.ok {
		t.Errorf("get of an unscraped upstream = %+v, want zero", got)
	}
	cancel()
	<-done // run returns once its context is done
}
