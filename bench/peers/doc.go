// Package peers holds the benchmark's peer routers: re-implementations, as
// Caddy reverse_proxy selection policies, of the prefix-aware routing
// algorithms of the dedicated LLM routers that prefix_cache is measured
// against. They exist only for the benchmark: neither caddymodule nor the
// root package imports this package, and bench/cmd/prefixbench registers
// them with a blank import.
//
//	peer_sglang         SGLang model gateway (SMG), policy cache_aware
//	peer_llmd           llm-d's default EPP profile: prefix (AutoTune), queue and KV-utilisation scorers
//	peer_kubeai         KubeAI PrefixHash (and SMG prefix_hash): consistent hashing with bounded loads
//	peer_vllmstack      vLLM production-stack router, routing logic prefixaware
//	peer_dynamo         NVIDIA Dynamo KV router, default: fed the engines' KV events
//	peer_dynamo_approx  NVIDIA Dynamo KV router with --no-kv-events (approximate)
//
// Each peer runs as its maintainers run it by default, fed what a real
// engine gives it: the engines' /metrics (llm-d, with
// vllm:cache_config_info for AutoTune) and KV events (Dynamo); each
// module's doc comment cites the upstream repository, commit and files it
// follows, its defaults, and where it deviates.
//
// Each router is two files: its algorithm as plain types and functions,
// tested with tables and no Caddy (radixtree.go, blockindex.go, chwbl.go,
// hashtrie.go, dynamokv.go), and its Caddy module (sglang.go, llmd.go,
// kubeai.go, vllmstack.go, dynamo.go), which feeds the algorithm the
// request and the upstreams' loads. body.go reads the body (putting the
// exact bytes back), text.go extracts the message texts some routers
// join, pool.go holds what the modules share, scrape.go polls the
// engines' /metrics for llm-d, kvsub.go follows their KV event streams
// for Dynamo. docs/peers.md describes the comparison and how to run it.
//
// The peers read the prompt as their upstreams do, from the routing text
// of prefix_cache (see dialect): SGLang joins the message
// texts with spaces, the vLLM stack with newlines, KubeAI hashes the first
// user message, llm-d hashes the routing text in place of the messages'
// JSON; Dynamo tokenizes the body with the engine's own chat template and
// tokenizer, as its frontend does with the model's. A character of text
// stands for a character of prompt, and 4 characters for a token where
// the original counts tokens (llm-d).
//
// The routers keep their own state per provisioned module, so each
// benchmark run, which loads a fresh Caddy, starts them cold, as it does
// prefix_cache. They set {http.reverse_proxy.prefix_cache.reason} to a
// short word saying which branch chose the upstream, so the benchmark's
// reason counts cover them too.
package peers
