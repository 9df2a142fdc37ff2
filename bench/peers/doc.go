// Package peers holds the benchmark's peer routers: re-implementations, as
// Caddy reverse_proxy selection policies, of the prefix-aware routing
// algorithms of the dedicated LLM routers that prefix_cache is measured
// against. They exist only for the benchmark: neither caddymodule nor the
// root package imports this package, and bench/cmd/prefixbench registers
// them with a blank import.
//
//	peer_sglang     SGLang model gateway, policy cache_aware
//	peer_llmd       llm-d / Gateway API Inference Extension: prefix, queue and KV-utilisation scorers
//	peer_kubeai     KubeAI PrefixHash (and SMG prefix_hash): consistent hashing with bounded loads
//	peer_vllmstack  vLLM production-stack router, routing logic prefixaware
//	peer_dynamo     NVIDIA Dynamo KV router in approximate mode (--no-kv-events)
//
// Each router is two files: its algorithm as plain types and functions,
// tested with tables and no Caddy (radixtree.go, blockindex.go, chwbl.go,
// hashtrie.go, approxkv.go), and its Caddy module (sglang.go, llmd.go,
// kubeai.go, vllmstack.go, dynamo.go), which feeds the algorithm the
// request's routing text and the upstreams' loads. Each module's doc
// comment cites the public source it follows, its defaults, and where it
// deviates. body.go reads the body (putting the exact bytes back), pool.go
// holds what the modules share, scrape.go polls the engines' /metrics for
// llm-d. docs/peers.md has the benchmark results.
//
// All peers route on the same routing text as prefix_cache (see
// caddymodule/dialect): the prompt rendered in chat-template order, which
// every router approximates in its own way (SGLang and the vLLM stack join
// message texts; llm-d marshals the messages). None of them tokenizes; a
// character of routing text stands for a character of prompt, and 4
// characters for a token where the original counts tokens.
//
// The routers keep their own state per provisioned module, so each
// benchmark run, which loads a fresh Caddy, starts them cold, as it does
// prefix_cache. They set {http.reverse_proxy.prefix_cache.reason} to a
// short word saying which branch chose the upstream, so the benchmark's
// reason counts cover them too.
package peers
