package main

// The peer routers (SGLang cache_aware, llm-d, KubeAI, vLLM production-stack
// prefixaware, Dynamo): selection policies peer_sglang, peer_llmd,
// peer_kubeai, peer_vllmstack and peer_dynamo, for -policies or
// -custom-policy.
import _ "github.com/prefixcache/caddy-prefixcache/bench/peers"
