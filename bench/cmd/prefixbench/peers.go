package main

// The peer routers (SGLang cache_aware, llm-d, KubeAI, vLLM production-stack
// prefixaware, Dynamo with KV events and with --no-kv-events): selection
// policies peer_sglang, peer_llmd, peer_kubeai, peer_vllmstack, peer_dynamo
// and peer_dynamo_approx, for -policies or -custom-policy. peer_dynamo runs
// its engines with KV events on (bench/driver peers.go).
import _ "github.com/prefixcache/caddy-prefixcache/bench/peers"
