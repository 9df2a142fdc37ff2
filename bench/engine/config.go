package engine

import (
	"fmt"
	"math"
	"time"
)

// Defaults of [Config]. They model Llama-3-8B (bf16) served by vLLM V1 on
// one H100 80GB, except the KV capacity, which is scaled down; the package
// documentation derives each one.
const (
	// DefaultModel is the model name served when Config.Model is empty.
	DefaultModel = "sim-llama-3-8b"

	// DefaultBlockSize is vLLM's --block-size default on CUDA.
	DefaultBlockSize = 16

	// DefaultKVBlocks is 65,536 tokens of KV cache. A real H100 holds about
	// 25,000 blocks (~400k tokens: 80 GB x 0.9 - 16 GB of weights, at
	// 128 KiB of K+V per token); the default is scaled down ~6x so that
	// benchmark working sets overflow it with modest amounts of text.
	DefaultKVBlocks = 4096

	// DefaultMaxNumSeqs is vLLM V1's --max-num-seqs for GPUs under 70 GiB
	// (1024 on an H100); 256 keeps the ratio of sequences to the scaled-down
	// KV capacity closer to a real H100's.
	DefaultMaxNumSeqs = 256

	// DefaultMaxNumBatchedTokens is vLLM V1's --max-num-batched-tokens for
	// the OpenAI server on GPUs with at least 70 GiB (H100, H200, MI300X).
	DefaultMaxNumBatchedTokens = 8192

	// DefaultStepBase (A) is the fixed cost of one forward pass: reading
	// 16 GB of weights at ~3 TB/s is ~5 ms, plus launch, sampling and
	// scheduling overhead. vLLM decodes a single Llama-3-8B stream on an
	// H100 at ~140 tokens/s, i.e. ~7 ms per step.
	DefaultStepBase = 7 * time.Millisecond

	// DefaultPrefillPerToken (B) is the marginal cost of one prefill token:
	// 16.7k tokens/s, the prefill throughput vLLM reaches for Llama-3-8B on
	// an H100 at 4k-8k token prompts (2 x 8e9 FLOPs per token plus
	// attention, at ~30-40% of the 989 TFLOP/s bf16 peak).
	DefaultPrefillPerToken = 60 * time.Microsecond

	// DefaultDecodePerSeq (C) is the marginal cost of one more decoding
	// sequence in a step: a step at batch 64 takes ~10 ms and at batch 256
	// ~20 ms (KV reads and per-sequence sampling).
	DefaultDecodePerSeq = 50 * time.Microsecond

	// DefaultFrontendBase is the API server's fixed latency per request
	// before the scheduler sees it: HTTP, JSON, chat template, output
	// detokenization and the first SSE write. It does not occupy the GPU.
	DefaultFrontendBase = 10 * time.Millisecond

	// DefaultFrontendPerToken is the API server's tokenization cost per
	// prompt token (a fast Rust BPE tokenizer, ~1M tokens/s).
	DefaultFrontendPerToken = time.Microsecond

	// DefaultTimeScale runs the simulation in real time.
	DefaultTimeScale = 1.0

	// DefaultMaxTokens is the output length of a request that sets neither
	// max_tokens nor max_completion_tokens.
	DefaultMaxTokens = 16
)

// Config holds the model of one simulated engine. Start from
// [DefaultConfig] and change fields; [New] validates but does not fill in
// zero fields, so that zero costs and a zero TimeScale stay expressible.
type Config struct {
	// Model name listed by /v1/models and used as the model_name label of
	// the metrics. Requests may name any model; it is echoed back.
	// Default: `sim-llama-3-8b`.
	Model string `json:"model,omitempty"`

	// Tokens per KV block, the unit of prefix caching (vLLM --block-size).
	// Default: `16`.
	BlockSize int `json:"block_size,omitempty"`

	// KV cache capacity in blocks. A request's prompt plus output is capped
	// at KVBlocks x BlockSize tokens (see the package documentation).
	// Default: `4096` (65,536 tokens).
	KVBlocks int `json:"kv_blocks,omitempty"`

	// Maximum number of running (batched) sequences (vLLM --max-num-seqs).
	// Default: `256`.
	MaxNumSeqs int `json:"max_num_seqs,omitempty"`

	// Token budget of one step: decode tokens plus prefill chunks (vLLM
	// --max-num-batched-tokens). Longer prefills are chunked. Default: `8192`.
	MaxNumBatchedTokens int `json:"max_num_batched_tokens,omitempty"`

	// Fixed duration of one step (A). Default: `7ms`.
	StepBase time.Duration `json:"step_base,omitempty"`

	// Step duration added per prefill token in the step (B). Default: `60µs`.
	PrefillPerToken time.Duration `json:"prefill_per_token,omitempty"`

	// Step duration added per decoding sequence in the step (C).
	// Default: `50µs`.
	DecodePerSeq time.Duration `json:"decode_per_seq,omitempty"`

	// Latency of the API server before a request is queued, concurrent
	// across requests. Default: `10ms`.
	FrontendBase time.Duration `json:"frontend_base,omitempty"`

	// API-server latency added per prompt token (tokenization).
	// Default: `1µs`.
	FrontendPerToken time.Duration `json:"frontend_per_token,omitempty"`

	// Multiplies every simulated duration: 1 is real time, 0.1 runs ten
	// times faster, 0 runs steps back to back with no delay. Below ~0.05
	// the Go timer and scheduling overhead (tens of µs per step) make times
	// longer than simulated. Default: `1`.
	TimeScale float64 `json:"time_scale,omitempty"`

	// Output tokens of a request that sets neither max_tokens nor
	// max_completion_tokens. Default: `16`.
	DefaultMaxTokens int `json:"default_max_tokens,omitempty"`

	// Publish KV cache events on GET /kv_events, as vLLM does with
	// --kv-events-config (see kvevents.go). Costs memory: a running
	// request keeps its prompt's tokens. Default: `false`.
	KVEvents bool `json:"kv_events,omitempty"`

	// If positive, a request without ignore_eos samples EOS (finish_reason
	// "stop") after a deterministic length drawn uniformly from
	// [1, 2 x MeanOutputTokens] from its prompt, if that comes before its
	// max tokens. Zero: every request generates exactly its max tokens,
	// finish_reason "length". Default: `0`.
	MeanOutputTokens int `json:"mean_output_tokens,omitempty"`
}

// DefaultConfig returns the default model: Llama-3-8B on one H100 in vLLM V1,
// with a KV cache of 65,536 tokens.
func DefaultConfig() Config {
	return Config{
		Model:               DefaultModel,
		BlockSize:           DefaultBlockSize,
		KVBlocks:            DefaultKVBlocks,
		MaxNumSeqs:          DefaultMaxNumSeqs,
		MaxNumBatchedTokens: DefaultMaxNumBatchedTokens,
		StepBase:            DefaultStepBase,
		PrefillPerToken:     DefaultPrefillPerToken,
		DecodePerSeq:        DefaultDecodePerSeq,
		FrontendBase:        DefaultFrontendBase,
		FrontendPerToken:    DefaultFrontendPerToken,
		TimeScale:           DefaultTimeScale,
		DefaultMaxTokens:    DefaultMaxTokens,
	}
}

// validate checks cfg; it changes nothing.
func (cfg Config) validate() error {
	switch {
	case cfg.Model == "":
		return fmt.Errorf("model must not be empty")
	case cfg.BlockSize < 1:
		return fmt.Errorf("block_size must be at least 1, got %d", cfg.BlockSize)
	case cfg.KVBlocks < 1:
		return fmt.Errorf("kv_blocks must be at least 1, got %d", cfg.KVBlocks)
	case cfg.KVBlocks > math.MaxInt32:
		return fmt.Errorf("kv_blocks must be at most %d, got %d", math.MaxInt32, cfg.KVBlocks)
	case cfg.KVBlocks*cfg.BlockSize < 2:
		return fmt.Errorf("kv_blocks x block_size must be at least 2 tokens, got %d", cfg.KVBlocks*cfg.BlockSize)
	case cfg.MaxNumSeqs < 1:
		return fmt.Errorf("max_num_seqs must be at least 1, got %d", cfg.MaxNumSeqs)
	case cfg.MaxNumBatchedTokens < 1:
		return fmt.Errorf("max_num_batched_tokens must be at least 1, got %d", cfg.MaxNumBatchedTokens)
	case cfg.StepBase < 0:
		return fmt.Errorf("step_base must not be negative, got %v", cfg.StepBase)
	case cfg.PrefillPerToken < 0:
		return fmt.Errorf("prefill_per_token must not be negative, got %v", cfg.PrefillPerToken)
	case cfg.DecodePerSeq < 0:
		return fmt.Errorf("decode_per_seq must not be negative, got %v", cfg.DecodePerSeq)
	case cfg.FrontendBase < 0:
		return fmt.Errorf("frontend_base must not be negative, got %v", cfg.FrontendBase)
	case cfg.FrontendPerToken < 0:
		return fmt.Errorf("frontend_per_token must not be negative, got %v", cfg.FrontendPerToken)
	case !(cfg.TimeScale >= 0) || math.IsInf(cfg.TimeScale, 0):
		return fmt.Errorf("time_scale must be a finite number at least 0, got %v", cfg.TimeScale)
	case cfg.DefaultMaxTokens < 1:
		return fmt.Errorf("default_max_tokens must be at least 1, got %d", cfg.DefaultMaxTokens)
	case cfg.MeanOutputTokens < 0:
		return fmt.Errorf("mean_output_tokens must not be negative, got %d", cfg.MeanOutputTokens)
	}
	return nil
}

// stepTime is the simulated duration of a step, before TimeScale:
// A + B x prefillTokens + C x decodeSeqs.
func (cfg Config) stepTime(prefillTokens, decodeSeqs int) time.Duration {
	return cfg.StepBase +
		time.Duration(prefillTokens)*cfg.PrefillPerToken +
		time.Duration(decodeSeqs)*cfg.DecodePerSeq
}

// frontendTime is the simulated API-server latency of a request with
// promptTokens tokens, before TimeScale.
func (cfg Config) frontendTime(promptTokens int) time.Duration {
	return cfg.FrontendBase + time.Duration(promptTokens)*cfg.FrontendPerToken
}

// scale applies TimeScale to a simulated duration.
func (cfg Config) scale(d time.Duration) time.Duration {
	if cfg.TimeScale == 1 {
		return d
	}
	return time.Duration(float64(d) * cfg.TimeScale)
}

// maxModelLen is the longest token sequence (prompt plus output) the KV
// cache can hold.
func (cfg Config) maxModelLen() int { return cfg.KVBlocks * cfg.BlockSize }
