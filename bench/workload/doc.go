// Package workload generates the request streams of the benchmark:
// shared-prefix groups, multi-turn chat sessions, agentic tool loops,
// retrieval-augmented sessions (RAG, the scoring set's held-out shape) and
// Mooncake trace replay. Every generator is deterministic: the same
// configuration and seed give byte-identical requests.
//
// A workload is a list of conversations. A conversation is a sequence of
// dependent OpenAI chat completion requests: each turn's request carries the
// whole history, including the answers the engine actually gave to the
// earlier turns, as a chat client does. A single-turn workload is a list of
// one-turn conversations. Every request streams (stream=true with
// stream_options.include_usage=true, so the final chunk reports prompt and
// cached tokens) and sets max_tokens and ignore_eos, so its output length is
// fixed by the workload.
//
// Arrival times are given at the workload's natural rate and rescaled by the
// driver to the rate it wants to offer (see [Workload.Rate]).
package workload
