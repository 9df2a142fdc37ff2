// Package engine simulates an LLM inference engine, vLLM V1 serving
// Llama-3-8B on one H100, closely enough to measure prefix-cache-aware
// routing through a real Caddy over real HTTP: what a routing policy changes
// (which engine holds which prompt prefix, how long queues grow, how much
// prefill a miss costs everyone on that engine) is modelled; the rest is
// not.
//
//	f, err := engine.StartFleet(8, engine.DefaultConfig())
//	// reverse_proxy to f.Addrs()...; read f.Engines()[i].Stats()
//	f.Close()
//
// # Endpoints
//
// [Engine.ServeHTTP] serves POST /v1/chat/completions and /v1/completions
// (OpenAI, streaming as SSE "data: {...}" chunks as tokens are produced,
// then a usage chunk with "choices": [] when stream_options.include_usage is
// set, then "data: [DONE]"; or one JSON response), POST /v1/messages
// (Anthropic, minimal: text, tools and tool results in, text out, streaming
// with Anthropic's events), GET /health, GET /v1/models, GET /metrics,
// POST /reset_prefix_cache and, with Config.KVEvents, GET /kv_events: the
// prefix cache's KV events (blocks stored and removed) as vLLM publishes
// them, in order, one batch per line (see kvevents.go).
//
// Usage reports prompt_tokens, completion_tokens and
// prompt_tokens_details.cached_tokens: the tokens found in the prefix cache
// when the request was first scheduled (Anthropic: input_tokens excluding
// cache_read_input_tokens). The output has max_completion_tokens, else
// max_tokens, else Config.DefaultMaxTokens tokens, exactly: the simulator
// never samples EOS unless Config.MeanOutputTokens is set, and then
// "ignore_eos": true (vLLM's extension) restores the exact length. The
// text is deterministic: a function of the prompt's tokens. "cache_salt"
// (vLLM) separates cache namespaces; "n" must be 1. Any model name is
// accepted and echoed.
//
// /metrics is Prometheus text with vLLM V1's names and labels
// (model_name, engine="0"): vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:kv_cache_usage_perc (blocks pinned by
// running requests / capacity), vllm:cache_config_info (an info gauge whose
// block_size and num_gpu_blocks labels give the cache's geometry, without
// model_name, as vLLM writes it), vllm:prefix_cache_queries_total and
// vllm:prefix_cache_hits_total (in tokens), vllm:prompt_tokens_total,
// vllm:generation_tokens_total, vllm:num_preemptions_total,
// vllm:request_success_total{finished_reason}, and the histograms
// vllm:time_to_first_token_seconds, vllm:e2e_request_latency_seconds and
// vllm:request_prefill_time_seconds (first scheduled to first token, in
// wall time, as the engine's step loop sleeps it) with vLLM's buckets.
//
// # Tokenizer and chat template
//
// Messages are rendered with a ChatML template
// ("<|im_start|>role\ntext<|im_end|>\n", tools in the system turn, tool
// calls as <tool_call> blocks, tool results as <tool_response> in a user
// turn, then "<|im_start|>assistant\n"), which is prefix-stable like a real
// template: a conversation's turn k+1 renders as an extension of turn k
// plus the answer.
//
// The tokenizer approximates byte-level BPE (see tokenizer.go): markers are
// single tokens; other text is pre-tokenized as the GPT-4/Llama-3 regex does
// (words with one leading space, runs of at most three digits, punctuation
// runs, whitespace runs), each pre-token is cut into pieces of at most 6
// bytes, and a piece's id is its FNV-1a hash. English prose comes out at
// 3.5-4 bytes per token (Llama-3: ~4.2). For prefix caching the property
// that matters holds exactly: identical text prefixes give identical token
// prefixes (up to the last pre-token of the shorter text, as with real BPE),
// hence identical block hashes. Generated words are at most three letters,
// so generated text tokenizes back to the generated tokens, and a follow-up
// turn quoting the answer hits the blocks cached while generating it.
//
// # Prefix cache
//
// As vLLM's automatic prefix caching (vllm/v1/core/block_pool.py,
// kv_cache_manager.py): the KV cache is Config.KVBlocks blocks of
// Config.BlockSize tokens. A full block is named by the chained hash of its
// parent's hash and its tokens, so a hash names a whole prefix. A new
// request hits the longest run of leading blocks present, stopping at the
// first miss, and at most its length minus one token (vLLM recomputes the
// last token, so a prompt of exactly k blocks hits k-1). Blocks used by
// running requests are pinned (reference counts). Unpinned blocks stay
// cached in a free queue; allocation evicts from its head; a finished or
// preempted request's blocks are appended in reverse order, so its tail is
// evicted before its head and a shared prefix outlives its suffixes. Blocks
// are cached when their KV is computed (end of the step), generated tokens
// included: a request that produced n tokens leaves prompt + n - 1 tokens of
// KV (the last sampled token is never fed back).
//
// When the cache is full, new requests wait in the queue (FCFS), and a
// running request that needs a block for its next token preempts the most
// recently admitted one (vLLM's recompute preemption: its blocks are freed
// but stay cached until evicted, and it goes back to the head of the queue).
// No request fails for capacity. A request longer than the cache cannot run
// at all, so it is cut down at arrival (where vLLM answers 400 for
// exceeding max_model_len): max tokens is capped at the capacity minus one
// token, then the prompt is truncated to its leading capacity - max tokens
// tokens, and usage reports the truncated prompt.
//
// # Step loop
//
// One goroutine per engine runs vLLM V1's scheduler: each step schedules the
// running requests first (one token for each decoding sequence, the next
// chunk for each unfinished prefill), then, if nothing was preempted,
// admits waiting requests in order while fewer than Config.MaxNumSeqs run
// and the Config.MaxNumBatchedTokens budget lasts, splitting a prefill that
// does not fit the budget over several steps (chunked prefill). The step
// then takes, in real time,
//
//	(A + B x prefill tokens in the step + C x decoding sequences) x TimeScale
//
// (time.Sleep on a timer; the step clock absorbs up to 5 ms of Go
// scheduling delay so busy periods last as simulated), after which every
// sequence whose tokens are all computed samples one token. A prefill thus
// delays every sequence decoding on the same engine, as on a GPU, and a
// miss costs B per uncached token while a hit costs nothing. TTFT, measured
// from the request's arrival at the handler, includes an API-server latency
// (FrontendBase + FrontendPerToken x prompt tokens, concurrent across
// requests, not occupying the step loop) and the queueing.
//
// # Constants
//
// The defaults ([DefaultConfig]) model Llama-3-8B in bf16 on one H100 SXM
// (989 TFLOP/s dense bf16, 3.35 TB/s) with vLLM V1:
//
//   - A = 7 ms per step: reading 16 GB of weights takes ~4.8 ms at
//     3.35 TB/s; kernel launches, sampling and scheduling bring a batch-1
//     decode step to ~7 ms (~140 tokens/s for one stream).
//   - B = 60 µs per prefill token (16.7k tokens/s): 2 x 8e9 FLOPs per token
//     plus attention, at ~30-40% of peak, which is what vLLM reaches on 4k-8k
//     token prompts; an 8k-token prefill takes ~0.5 s.
//   - C = 50 µs per decoding sequence: KV reads and per-sequence work bring
//     a step to ~10 ms at batch 64 and ~20 ms at batch 256.
//   - FrontendBase = 10 ms and FrontendPerToken = 1 µs: HTTP, JSON, chat
//     template, detokenization, and a fast BPE tokenizer at ~1M tokens/s.
//     They put the TTFT of a fully cached request at 20-30 ms, within the
//     20-60 ms typically reported for cached long prompts, instead of the
//     bare step time.
//   - BlockSize = 16 (vLLM's default), MaxNumBatchedTokens = 8192 (vLLM V1's
//     default for the OpenAI server on GPUs of 70 GiB or more,
//     vllm/engine/arg_utils.py), MaxNumSeqs = 256 (vLLM's default below
//     70 GiB; 1024 on an H100, but see the next item).
//   - KVBlocks = 4096 (65,536 tokens). An H100 holds ~25,000 blocks for this
//     model (80 GB x 0.9 - 16 GB weights, at 128 KiB of K+V per token:
//     32 layers x 8 KV heads x 128 dims x 2 x 2 bytes). The default is ~6x
//     smaller, so that working sets of benchmark size overflow it; set
//     KVBlocks = 25000 for a full H100.
//
// # Cold and warm TTFT
//
// An 8k-token prompt (7,982 tokens in TestColdWarmTTFT), idle engine:
//
//	cold: 10 ms + 7,982 x 1 µs (frontend) + 7 ms + 7,982 x 60 µs (one step) = 504 ms
//	warm: 18 ms (frontend) + 7 ms + 14 x 60 µs (7,968 tokens cached)        =  26 ms
//
// a ratio of 19x in the model; measured at the HTTP client, with the
// engine's own JSON and tokenizing work and the HTTP round trip added, cold
// is ~510 ms and warm ~30 ms: 15-18x. Real engines show the same order:
// prefilling 8k tokens of an 8B model takes 0.4-0.6 s on an H100, and
// published vLLM prefix-caching measurements report 10-20x lower TTFT for
// long cached prefixes (for example 1.1 s to 60 ms, 18x, for an 8 kB system
// prompt on a smaller GPU), the warm floor being the API server, not the GPU.
//
// # Not modelled
//
// Attention cost growing with context length (prefill and decode cost per
// token are flat), CUDA graphs and padding, speculative decoding, KV offload
// to CPU or disk, priorities, stop strings, logprobs, n > 1, tool-call
// generation, the tokenizer's vocabulary. Two identical prompts scheduled in
// the same step both miss (vLLM may let the second hit). 64-bit block hashes
// are trusted without comparing tokens.
//
// # Memory
//
// An engine holds, per KV block, 24 bytes plus a map entry while the block
// is cached: ~47 bytes per block measured with every block cached, ~290 KiB
// for a 100k-token cache (TestFleetMemory), so a fleet of 8 such engines
// costs ~2.3 MB. A request keeps no text: while it runs it holds one 8-byte
// hash and one 4-byte block id per 16 tokens, and the tokens of its last
// partial block; generated text is recomputed from a seed when streamed.
package engine
