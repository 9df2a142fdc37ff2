package engine

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Histogram buckets of vLLM V1 (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// histogram is a Prometheus histogram; counts are per bucket, not
// cumulative, the last one being +Inf.
type histogram struct {
	bounds []float64
	counts []uint64
	sum    float64
	count  uint64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += v
	h.count++
}

func (h histogram) clone() histogram {
	h.counts = append([]uint64(nil), h.counts...)
	return h
}

// metricsSnapshot is what /metrics shows, copied under the engine's lock.
type metricsSnapshot struct {
	c                counters
	running, waiting int
	usage            float64
}

// handleMetrics serves the Prometheus text format (version 0.0.4) with
// vLLM's metric names and labels.
func (e *Engine) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	s := metricsSnapshot{
		c:       e.sched.c,
		running: len(e.sched.running),
		waiting: len(e.sched.waiting),
		usage:   e.usageLocked(),
	}
	s.c.ttft, s.c.e2e, s.c.prefill = s.c.ttft.clone(), s.c.e2e.clone(), s.c.prefill.clone()
	e.mu.Unlock()

	var b bytes.Buffer
	labels := `model_name="` + escapeLabel(e.cfg.Model) + `",engine="0"`
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s{%s} %s\n", name, help, name, name, labels, formatFloat(v))
	}
	counter := func(name, help string, v int64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s{%s} %d\n", name, help, name, name, labels, v)
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float64(s.running))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", float64(s.waiting))
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.usage)
	e.writeCacheConfigInfo(&b)
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", s.c.promptTokens)
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", s.c.cachedTokens)
	counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", s.c.preemptions)
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", s.c.promptTokens)
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.", s.c.generatedTokens)
	name := "vllm:request_success_total"
	fmt.Fprintf(&b, "# HELP %s Count of successfully processed requests.\n# TYPE %s counter\n", name, name)
	fmt.Fprintf(&b, "%s{%s,finished_reason=\"length\"} %d\n", name, labels, s.c.finishedLength)
	fmt.Fprintf(&b, "%s{%s,finished_reason=\"stop\"} %d\n", name, labels, s.c.finishedStop)
	fmt.Fprintf(&b, "%s{%s,finished_reason=\"abort\"} %d\n", name, labels, s.c.aborted)
	writeHistogram(&b, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels, s.c.ttft)
	writeHistogram(&b, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", labels, s.c.e2e)
	writeHistogram(&b, "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", labels, s.c.prefill)

	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(b.Bytes())
}

// writeCacheConfigInfo writes vllm:cache_config_info as vLLM does
// (vllm-project/vllm vllm/v1/metrics/loggers.py at 005a810bc40f,
// PrometheusStatLogger.log_metrics_info; vllm/config/cache.py at
// 002f10e0cfa1, CacheConfig.metrics_info and its fields): an
// info-style gauge set to 1, whose labels are CacheConfig.metrics_info(),
// every field of vLLM's CacheConfig as str(value) in declaration order
// (Python's True, False and None), then engine; there is no model_name
// label, and prometheus_client writes the value 1 as "1.0". Routers read
// block_size and num_gpu_blocks from it (GIE/llm-d's AutoTune). This
// writes the fields a vLLM V1 server on CUDA reports that this engine
// models, with vLLM's defaults for the others it shows; fields vLLM adds
// for hybrid (Mamba) models and offloading are left out.
func (e *Engine) writeCacheConfigInfo(b *bytes.Buffer) {
	const name = "vllm:cache_config_info"
	labels := [][2]string{
		{"block_size", strconv.Itoa(e.cfg.BlockSize)},
		{"user_specified_block_size", "False"},
		{"gpu_memory_utilization", "0.92"},
		{"cache_dtype", "auto"},
		{"is_attention_free", "False"},
		{"num_gpu_blocks_override", "None"},
		{"sliding_window", "None"},
		{"enable_prefix_caching", "True"},
		{"prefix_caching_hash_algo", "sha256"},
		{"num_gpu_blocks", strconv.Itoa(e.cfg.KVBlocks)},
		{"num_cpu_blocks", "None"},
		{"kv_sharing_fast_prefill", "False"},
		{"kv_cache_memory_bytes", "None"},
		{"kv_offloading_size", "None"},
		{"kv_offloading_backend", "native"},
		{"engine", "0"},
	}
	fmt.Fprintf(b, "# HELP %s Information of the LLMEngine CacheConfig\n# TYPE %s gauge\n%s{", name, name, name)
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(b, "%s=\"%s\"", l[0], escapeLabel(l[1]))
	}
	b.WriteString("} 1.0\n")
}

func writeHistogram(b *bytes.Buffer, name, help, labels string, h histogram) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cum uint64
	for i, c := range h.counts {
		cum += c
		le := "+Inf"
		if i < len(h.bounds) {
			le = formatFloat(h.bounds[i])
		}
		fmt.Fprintf(b, "%s_bucket{%s,le=\"%s\"} %d\n", name, labels, le, cum)
	}
	fmt.Fprintf(b, "%s_sum{%s} %s\n", name, labels, formatFloat(h.sum))
	fmt.Fprintf(b, "%s_count{%s} %d\n", name, labels, h.count)
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
