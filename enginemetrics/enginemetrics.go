// Package enginemetrics reads what an LLM inference engine says about
// itself on its Prometheus endpoint: how many requests it is running and
// how many wait in its queue, how many tokens of KV cache it has, and how
// full that cache is. The policy scrapes each upstream in the background
// and uses these as hints; this package only parses one scrape.
//
// It recognises four engines by their metric names:
//
//	engine     running / waiting requests                               KV capacity (tokens)                       KV usage (0-1)
//	vLLM       vllm:num_requests_running, vllm:num_requests_waiting     vllm:cache_config_info labels              vllm:kv_cache_usage_perc
//	                                                                    num_gpu_blocks x block_size                (vllm:gpu_cache_usage_perc before V1)
//	SGLang     sglang:num_running_reqs, sglang:num_queue_reqs           sglang:max_total_num_tokens                sglang:token_usage
//	TGI        tgi_batch_current_size, tgi_queue_size                   -                                          -
//	llama.cpp  llamacpp:requests_processing, llamacpp:requests_deferred -                                          llamacpp:kv_cache_usage_ratio
//
// and how fast each prefills, as two counters whose ratio over a window
// is the rate: the prompt tokens it computed (not read from its prefix
// cache) and the seconds it spent computing them.
//
//	engine     prefill tokens computed                                  prefill seconds
//	vLLM       vllm:prompt_tokens_total - vllm:prefix_cache_hits_total  vllm:request_prefill_time_seconds (histogram sum)
//	SGLang     sglang:realtime_tokens_total{mode="prefill_compute"}     sglang:forward_execution_seconds_total{category="extend"}
//	llama.cpp  llamacpp:prompt_tokens_total                             llamacpp:prompt_seconds_total
//
// vLLM's seconds are each request's time in its prefill phase, summed
// over requests: requests prefilled in the same steps count the same
// time each, so the rate is a request's prefill speed, below the
// engine's throughput when several prefill at once. SGLang's are the
// GPU's time in prefill (extend) batches, published only with
// SGLANG_ENABLE_METRICS_DEVICE_TIMER=1; TGI publishes neither.
//
// Sources: vLLM's vllm/v1/metrics/loggers.py (PrometheusStatLogger, whose
// cache_config_info carries CacheConfig.metrics_info as labels), SGLang's
// python/sglang/srt/metrics/collector.py, TGI's metrics reference
// (docs/source/reference/metrics.md), llama.cpp's tools/server/README.md
// (/metrics, with --metrics). An engine serving several models, or
// several data-parallel ranks, labels each series (model_name, engine):
// the counts are summed over them, as they are one upstream's load.
//
// A scrape that names none of these is [ErrUnknownEngine]: the policy
// then leaves that upstream as it would without scraping.
package enginemetrics

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Engine names the kind of engine a scrape came from.
type Engine uint8

const (
	Unknown Engine = iota
	VLLM
	SGLang
	TGI
	LlamaCpp
)

var engineNames = [...]string{Unknown: "unknown", VLLM: "vllm", SGLang: "sglang", TGI: "tgi", LlamaCpp: "llamacpp"}

func (e Engine) String() string {
	if int(e) < len(engineNames) {
		return engineNames[e]
	}
	return "unknown"
}

// Sample is what one scrape said. A count the engine does not publish is
// -1.
type Sample struct {
	Engine Engine
	// Running and Waiting are requests: scheduled in the engine's batch,
	// and queued for a slot in it.
	Running, Waiting float64
	// KVTokens is how many tokens the engine's KV cache holds.
	KVTokens float64
	// KVUsage is the share of the KV cache in use, from 0 to 1.
	KVUsage float64
	// PrefillTokens and PrefillSeconds are counters, since the engine
	// started: the prompt tokens it computed, and the seconds it spent
	// computing them. -1 unless the engine publishes both.
	PrefillTokens, PrefillSeconds float64
}

// Queue is the engine's requests in flight, running and waiting, or -1
// when it publishes neither.
func (s Sample) Queue() float64 {
	if s.Running < 0 && s.Waiting < 0 {
		return -1
	}
	return max(s.Running, 0) + max(s.Waiting, 0)
}

// ErrUnknownEngine is returned for a well-formed scrape of no engine
// this package knows.
var ErrUnknownEngine = errors.New("no metric of a known engine")

// What a value may be, whatever an endpoint sends: counts and
// capacities far beyond any engine's, never negative, NaN or infinite.
const (
	maxCount   = 1 << 24 // requests
	maxTokens  = 1 << 40 // tokens of KV cache, or counted since a start
	maxSeconds = 1 << 40
)

// family says where one metric family goes in a Sample.
type family struct {
	engine Engine
	field  field
}

type field uint8

const (
	running field = iota
	waiting
	kvTokens
	kvUsage
	cacheConfig // vLLM's info gauge: capacity in its labels
	promptTokens
	cachedTokens
	prefillTokens  // of the series labelled as the family's label says
	prefillSeconds // a counter, or a histogram's sum
)

var families = map[string]family{
	"vllm:num_requests_running":         {VLLM, running},
	"vllm:num_requests_waiting":         {VLLM, waiting},
	"vllm:cache_config_info":            {VLLM, cacheConfig},
	"vllm:kv_cache_usage_perc":          {VLLM, kvUsage},
	"vllm:gpu_cache_usage_perc":         {VLLM, kvUsage},
	"vllm:prompt_tokens_total":          {VLLM, promptTokens},
	"vllm:prefix_cache_hits_total":      {VLLM, cachedTokens},
	"vllm:gpu_prefix_cache_hits_total":  {VLLM, cachedTokens},
	"vllm:request_prefill_time_seconds": {VLLM, prefillSeconds},
	// Its sum line, read alone: the only line of the histogram kept for
	// the parser, and a family of its own where no # TYPE names it.
	"vllm:request_prefill_time_seconds_sum": {VLLM, prefillSeconds},

	"sglang:num_running_reqs":                {SGLang, running},
	"sglang:num_queue_reqs":                  {SGLang, waiting},
	"sglang:max_total_num_tokens":            {SGLang, kvTokens},
	"sglang:token_usage":                     {SGLang, kvUsage},
	"sglang:realtime_tokens_total":           {SGLang, prefillTokens},
	"sglang:forward_execution_seconds_total": {SGLang, prefillSeconds},

	"tgi_batch_current_size": {TGI, running},
	"tgi_queue_size":         {TGI, waiting},

	"llamacpp:requests_processing":  {LlamaCpp, running},
	"llamacpp:requests_deferred":    {LlamaCpp, waiting},
	"llamacpp:kv_cache_usage_ratio": {LlamaCpp, kvUsage},
	"llamacpp:prompt_tokens_total":  {LlamaCpp, prefillTokens},
	"llamacpp:prompt_seconds_total": {LlamaCpp, prefillSeconds},
}

// series selects, of a family in families, the series that count when
// only some do: a label's name and value.
var series = map[string][2]string{
	"sglang:realtime_tokens_total":           {"mode", "prefill_compute"},
	"sglang:forward_execution_seconds_total": {"category", "extend"},
}

// Parse reads one scrape, in the format its response header names (the
// Prometheus text format when it names none), and returns what it says.
// It returns an error for a body that is not a well-formed exposition,
// and ErrUnknownEngine for one that has none of the metrics above. The
// caller bounds the body's size.
//
// A body the parser cannot handle is an error, never a panic: the text
// parser of prometheus/common v0.71.0 dereferences nil on some malformed
// inputs (FuzzParse found one, in testdata), and a scrape is whatever
// the upstream sends.
func Parse(body io.Reader, header http.Header) (s Sample, err error) {
	defer func() {
		if p := recover(); p != nil {
			s, err = Sample{}, fmt.Errorf("parsing metrics: parser failed: %v", p)
		}
	}()
	s = Sample{Running: -1, Waiting: -1, KVTokens: -1, KVUsage: -1, PrefillTokens: -1, PrefillSeconds: -1}
	format := expfmt.ResponseFormat(header)
	if t := format.FormatType(); t == expfmt.TypeUnknown || t == expfmt.TypeTextPlain {
		// The text format's lines stand alone: only the few of the
		// families read here go to the parser, not the hundreds of
		// histogram buckets an engine publishes besides.
		format = expfmt.NewFormat(expfmt.TypeTextPlain)
		kept, err := keepLines(body)
		if err != nil {
			return Sample{}, err
		}
		body = bytes.NewReader(kept)
	}
	dec := expfmt.NewDecoder(body, format)
	// A scrape naming two engines' metrics (a sidecar re-exporting
	// another's) is read as the engine with the most families in it,
	// the first in Engine order on a tie: the decoder hands families
	// out in no fixed order.
	var by [len(engineNames)]Sample
	var seen [len(engineNames)]int
	for i := range by {
		by[i] = s
	}
	// vLLM's computed tokens are its prompt tokens less its cache hits.
	var prompt, cached [len(engineNames)]float64
	for i := range prompt {
		prompt[i], cached[i] = -1, -1
	}
	var mf dto.MetricFamily
	for {
		mf.Reset()
		err = dec.Decode(&mf)
		if err == io.EOF {
			break
		}
		if err != nil {
			return Sample{}, fmt.Errorf("parsing metrics: %w", err)
		}
		f, ok := families[mf.GetName()]
		if !ok {
			continue
		}
		e := &by[f.engine]
		e.Engine = f.engine
		seen[f.engine]++
		switch f.field {
		case running:
			e.Running = total(&mf, maxCount, false)
		case waiting:
			e.Waiting = total(&mf, maxCount, false)
		case kvTokens:
			e.KVTokens = total(&mf, maxTokens, false)
		case kvUsage:
			e.KVUsage = usage(&mf)
		case cacheConfig:
			e.KVTokens = cacheTokens(&mf)
		case promptTokens:
			prompt[f.engine] = total(&mf, maxTokens, false)
		case cachedTokens:
			cached[f.engine] = total(&mf, maxTokens, false)
		case prefillTokens:
			e.PrefillTokens = total(&mf, maxTokens, false)
		case prefillSeconds:
			e.PrefillSeconds = total(&mf, maxSeconds, true)
		}
	}
	if p, c := prompt[VLLM], cached[VLLM]; p >= 0 && c >= 0 {
		by[VLLM].PrefillTokens = max(p-c, 0)
	}
	best := Unknown
	for e := range by {
		if seen[e] > seen[best] {
			best = Engine(e)
		}
	}
	if best == Unknown {
		return Sample{}, ErrUnknownEngine
	}
	s = by[best]
	if s.PrefillTokens < 0 || s.PrefillSeconds < 0 {
		s.PrefillTokens, s.PrefillSeconds = -1, -1
	}
	return s, nil
}

// Bounds of keepLines: far beyond any engine's output of the families
// read here (a few lines per model and data-parallel rank), so that a
// hostile endpoint cannot make a scrape's parse cost more than this.
const (
	maxLine      = 64 << 10
	maxKeptBytes = 256 << 10
)

// ErrTooMuch is returned for a scrape whose lines of the families read
// here exceed what any engine writes.
var ErrTooMuch = errors.New("too many lines of engine metrics")

// keepLines returns the lines of a text exposition that belong to the
// families read here: their samples and their # TYPE and # HELP
// comments.
func keepLines(r io.Reader) ([]byte, error) {
	br := bufio.NewReaderSize(r, 16<<10)
	var kept []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: read it whole, up to
			// maxLine, to see whether it is one of ours.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) <= maxLine {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			if len(long) > maxLine {
				return nil, fmt.Errorf("parsing metrics: a line longer than %d bytes", maxLine)
			}
			line = long
		}
		if len(line) > 0 && wanted(line) {
			if len(kept)+len(line) > maxKeptBytes {
				return nil, ErrTooMuch
			}
			kept = append(kept, line...)
			if line[len(line)-1] != '\n' {
				kept = append(kept, '\n')
			}
		}
		if err == io.EOF {
			return kept, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading metrics: %w", err)
		}
	}
}

// wanted reports whether a line of the text format is a sample or a
// # TYPE or # HELP comment of a family in families.
func wanted(line []byte) bool {
	if len(line) > 0 && line[0] == '#' {
		rest := bytes.TrimLeft(line[1:], " \t")
		for _, kw := range [...]string{"TYPE", "HELP"} {
			if after, ok := bytes.CutPrefix(rest, []byte(kw)); ok && len(after) > 0 && (after[0] == ' ' || after[0] == '\t') {
				return known(bytes.TrimLeft(after, " \t"))
			}
		}
		return false
	}
	return known(bytes.TrimLeft(line, " \t"))
}

// known reports whether b starts with the name of a family in families,
// followed by the end of the name.
func known(b []byte) bool {
	end := bytes.IndexAny(b, "{ \t\n")
	if end < 0 {
		end = len(b)
	}
	_, ok := families[string(b[:end])]
	return ok
}

// total adds up the gauge's (or counter's, or untyped) values of the
// series that count (series), or with sums the histogram's sums,
// each clamped to [0, limit]; -1 when it has none.
func total(mf *dto.MetricFamily, limit float64, sums bool) float64 {
	sel, selected := series[mf.GetName()]
	sum, n := 0.0, 0
	for _, m := range mf.GetMetric() {
		if selected && !hasLabel(m, sel[0], sel[1]) {
			continue
		}
		v, ok := value(m)
		if h := m.GetHistogram(); h != nil && sums {
			v, ok = h.GetSampleSum(), !math.IsNaN(h.GetSampleSum()) && !math.IsInf(h.GetSampleSum(), 0)
		}
		if !ok {
			continue
		}
		sum += min(max(v, 0), limit)
		n++
	}
	if n == 0 {
		return -1
	}
	return min(sum, limit)
}

// hasLabel reports whether m has the label name with value.
func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// usage is the family's highest value in [0, 1]: of several ranks, the
// fullest cache is the one that evicts first.
func usage(mf *dto.MetricFamily) float64 {
	u := -1.0
	for _, m := range mf.GetMetric() {
		if v, ok := value(m); ok {
			u = max(u, min(max(v, 0), 1))
		}
	}
	return u
}

// cacheTokens reads vLLM's cache_config_info, an info gauge whose labels
// hold the cache's configuration: num_gpu_blocks blocks of block_size
// tokens each, summed over the series (data-parallel ranks).
func cacheTokens(mf *dto.MetricFamily) float64 {
	total, n := 0.0, 0
	for _, m := range mf.GetMetric() {
		var blocks, size float64 = -1, -1
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "num_gpu_blocks":
				blocks = parseCount(l.GetValue())
			case "block_size":
				size = parseCount(l.GetValue())
			}
		}
		if blocks <= 0 || size <= 0 {
			continue
		}
		total += min(blocks*size, maxTokens)
		n++
	}
	if n == 0 {
		return -1
	}
	return min(total, maxTokens)
}

// parseCount parses a label's positive integer ("None" when vLLM has not
// sized its cache yet), or returns -1.
func parseCount(s string) float64 {
	n, err := strconv.ParseUint(s, 10, 40)
	if err != nil {
		return -1
	}
	return float64(n)
}

// value is a gauge's or an untyped metric's finite value.
func value(m *dto.Metric) (float64, bool) {
	var v float64
	switch {
	case m.Gauge != nil:
		v = m.Gauge.GetValue()
	case m.Untyped != nil:
		v = m.Untyped.GetValue()
	case m.Counter != nil:
		v = m.Counter.GetValue()
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}
