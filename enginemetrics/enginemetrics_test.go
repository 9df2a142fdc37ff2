package enginemetrics

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// The expositions below follow each engine's own output: names, types,
// labels and value formats as the engine writes them (vLLM V1 through
// prometheus_client, with an engine label per data-parallel rank).

const vllmV1 = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4375
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 81234.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 61234.0
# HELP vllm:request_prefill_time_seconds Histogram of time spent in PREFILL phase for request.
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.5
vllm:request_prefill_time_seconds_bucket{engine="0",le="0.3",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:request_prefill_time_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.5
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="27719",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
`

// vllmDP2 is two data-parallel ranks behind one endpoint.
const vllmDP2 = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:num_requests_waiting{engine="1",model_name="m"} 6.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.9
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="1000"} 1.0
`

// vllmV0 is the V0 engine's cache usage name, with a cache not yet sized.
const vllmV0 = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.05
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0
`

const sglang = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 11.0
# HELP sglang:max_total_num_tokens Maximum total number of tokens
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="meta-llama/Llama-3.1-8B-Instruct"} 161721.0
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# HELP sglang:cache_hit_rate The cache hit rate
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0075
`

// sglangTimed is SGLang with SGLANG_ENABLE_METRICS_DEVICE_TIMER=1: the
// GPU's time per kind of batch, and the tokens per mode, per rank.
const sglangTimed = sglang + `# HELP sglang:realtime_tokens_total Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.
# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{dp_rank="0",mode="prefill_compute",model_name="m"} 971400.0
sglang:realtime_tokens_total{dp_rank="0",mode="prefill_cache",model_name="m"} 3829888.0
sglang:realtime_tokens_total{dp_rank="0",mode="decode",model_name="m"} 156755.0
sglang:realtime_tokens_total{dp_rank="1",mode="prefill_compute",model_name="m"} 28600.0
# HELP sglang:forward_execution_seconds_total Total time that GPU is busy executing model forward passes. Refer to ForwardMode for category labels.
# TYPE sglang:forward_execution_seconds_total counter
sglang:forward_execution_seconds_total{category="extend",dp_rank="0",model_name="m"} 80.0
sglang:forward_execution_seconds_total{category="decode",dp_rank="0",model_name="m"} 600.0
sglang:forward_execution_seconds_total{category="extend",dp_rank="1",model_name="m"} 20.0
`

// tgi is as TGI's router writes it (metrics-exporter-prometheus): no
// HELP lines, gauges without labels.
const tgi = `# TYPE tgi_queue_size gauge
tgi_queue_size 5
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 8
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 2048
# TYPE tgi_request_count counter
tgi_request_count 4411
`

const llamacpp = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 33065
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 12.5
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.63
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
`

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want Sample
	}{
		{"vllm v1", vllmV1, Sample{Engine: VLLM, Running: 3, Waiting: 2, KVTokens: 27719 * 16, KVUsage: 0.4375, PrefillTokens: 81234 - 61234, PrefillSeconds: 2.5}},
		{"vllm data parallel", vllmDP2, Sample{Engine: VLLM, Running: 5, Waiting: 6, KVTokens: 32000, KVUsage: 0.9, PrefillTokens: -1, PrefillSeconds: -1}},
		{"vllm v0, cache not sized", vllmV0, Sample{Engine: VLLM, Running: 1, Waiting: 0, KVTokens: -1, KVUsage: 0.05, PrefillTokens: -1, PrefillSeconds: -1}},
		{"sglang", sglang, Sample{Engine: SGLang, Running: 7, Waiting: 11, KVTokens: 161721, KVUsage: 0.28, PrefillTokens: -1, PrefillSeconds: -1}},
		{"tgi", tgi, Sample{Engine: TGI, Running: 8, Waiting: 5, KVTokens: -1, KVUsage: -1, PrefillTokens: -1, PrefillSeconds: -1}},
		{"llama.cpp", llamacpp, Sample{Engine: LlamaCpp, Running: 2, Waiting: 1, KVTokens: -1, KVUsage: 0.63, PrefillTokens: 33065, PrefillSeconds: 12.5}},
		{"sglang with device timers", sglangTimed, Sample{Engine: SGLang, Running: 7, Waiting: 11, KVTokens: 161721, KVUsage: 0.28, PrefillTokens: 971400 + 28600, PrefillSeconds: 80 + 20}},
		{"vllm prefill sum with no # TYPE", "vllm:prompt_tokens_total 900\nvllm:prefix_cache_hits_total 100\nvllm:request_prefill_time_seconds_sum 2\n",
			Sample{Engine: VLLM, Running: -1, Waiting: -1, KVTokens: -1, KVUsage: -1, PrefillTokens: 800, PrefillSeconds: 2}},
		{"prefill tokens without seconds are neither", "vllm:prompt_tokens_total 900\nvllm:prefix_cache_hits_total 100\n",
			Sample{Engine: VLLM, Running: -1, Waiting: -1, KVTokens: -1, KVUsage: -1, PrefillTokens: -1, PrefillSeconds: -1}},
		{"only waiting", "vllm:num_requests_waiting 4\n", Sample{Engine: VLLM, Running: -1, Waiting: 4, KVTokens: -1, KVUsage: -1, PrefillTokens: -1, PrefillSeconds: -1}},
		{"negative and NaN are not load", "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} -3\nvllm:num_requests_running{engine=\"1\"} NaN\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting +Inf\n",
			Sample{Engine: VLLM, Running: 0, Waiting: -1, KVTokens: -1, KVUsage: -1, PrefillTokens: -1, PrefillSeconds: -1}},
		{"absurd values are clamped", "vllm:num_requests_waiting 1e300\nvllm:kv_cache_usage_perc 7\n",
			Sample{Engine: VLLM, Running: -1, Waiting: maxCount, KVTokens: -1, KVUsage: 1, PrefillTokens: -1, PrefillSeconds: -1}},
		{"absurd capacity is clamped", "vllm:cache_config_info{block_size=\"1099511627775\",num_gpu_blocks=\"1099511627775\"} 1\n",
			Sample{Engine: VLLM, Running: -1, Waiting: -1, KVTokens: maxTokens, KVUsage: -1, PrefillTokens: -1, PrefillSeconds: -1}},
		{"a type that holds no value", "# TYPE vllm:num_requests_waiting histogram\nvllm:num_requests_waiting 3\n",
			Sample{Engine: VLLM, Running: -1, Waiting: -1, KVTokens: -1, KVUsage: -1, PrefillTokens: -1, PrefillSeconds: -1}},
		{"the engine with the most families decides", tgi + sglang, Sample{Engine: SGLang, Running: 7, Waiting: 11, KVTokens: 161721, KVUsage: 0.28, PrefillTokens: -1, PrefillSeconds: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.body), http.Header{"Content-Type": {"text/plain; version=0.0.4; charset=utf-8"}})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got != tc.want {
				t.Errorf("Parse = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A scrape is read only as far as what engines write: more lines of the
// families read here than any engine has is refused before parsing.
func TestParseBoundsWhatItParses(t *testing.T) {
	_, err := Parse(bytes.NewReader(hostileScrape()), nil)
	if !errors.Is(err, ErrTooMuch) {
		t.Errorf("Parse of %d bytes of waiting samples: %v, want ErrTooMuch", len(hostileScrape()), err)
	}
	// The skipped families cost no parse, however long: vLLM's own
	// scrape, with a megabyte of other histograms before it.
	body := strings.Repeat("python_gc_objects_collected_total{generation=\"0\"} 1.0\n", 20000) + vllmV1
	s, err := Parse(strings.NewReader(body), nil)
	if err != nil || s.Waiting != 2 {
		t.Errorf("Parse = %+v, %v; want waiting 2", s, err)
	}
}

func TestQueue(t *testing.T) {
	for _, tc := range []struct {
		s    Sample
		want float64
	}{
		{Sample{Running: 3, Waiting: 2}, 5},
		{Sample{Running: -1, Waiting: 2}, 2},
		{Sample{Running: 3, Waiting: -1}, 3},
		{Sample{Running: -1, Waiting: -1}, -1},
	} {
		if got := tc.s.Queue(); got != tc.want {
			t.Errorf("%+v.Queue() = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		header  http.Header
		unknown bool
	}{
		{"another program's metrics", "# TYPE go_goroutines gauge\ngo_goroutines 12\n", nil, true},
		{"empty", "", nil, true},
		{"html", "<html><body>404</body></html>", nil, true},
		{"json", `{"running": 3}`, http.Header{"Content-Type": {"application/json"}}, true},
		{"truncated mid-sample", "vllm:num_requests_waiting{model_name=\"m", nil, false},
		{"a value that is not a number", "vllm:num_requests_waiting 3x\n", nil, false},
		{"what made prometheus/common's text parser panic", "#00000000000000\n# TYPE A0000000000000000000000000000000 histogrAm\n{A=\"\",A0=\"0\",A1=\"00\"}00", nil, true},
		{"a line past the line bound", "vllm:num_requests_waiting{model_name=\"" + strings.Repeat("m", 70<<10) + "\"} 1\n", nil, false},
		{"protobuf cut short", "\x7f\x0a\x03abc", http.Header{"Content-Type": {"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(strings.NewReader(tc.body), tc.header)
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", s)
			}
			if got := errors.Is(err, ErrUnknownEngine); got != tc.unknown {
				t.Errorf("Parse error %v: ErrUnknownEngine %v, want %v", err, got, tc.unknown)
			}
		})
	}
}

// FuzzParse checks that no body makes Parse panic or return a value the
// policy could not use: counts never negative past the -1 that means
// unpublished, never NaN, within their clamps.
func FuzzParse(f *testing.F) {
	for _, s := range []string{vllmV1, vllmDP2, vllmV0, sglang, tgi, llamacpp, "vllm:num_requests_waiting 1e300\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		s, err := Parse(strings.NewReader(body), nil)
		if err != nil {
			return
		}
		for name, v := range map[string][2]float64{
			"running":   {s.Running, maxCount},
			"waiting":   {s.Waiting, maxCount},
			"kv tokens": {s.KVTokens, maxTokens},
			"kv usage":  {s.KVUsage, 1},
		} {
			if !(v[0] == -1 || (v[0] >= 0 && v[0] <= v[1])) {
				t.Fatalf("%s = %v, want -1 or in [0, %v]", name, v[0], v[1])
			}
		}
		if s.Engine == Unknown {
			t.Fatalf("no error, but engine unknown: %+v", s)
		}
	})
}
