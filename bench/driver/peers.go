package driver

import "encoding/json"

// peerPolicies are the peer routers of bench/peers, known to
// ParsePolicies by name, each with its upstream's defaults. A command that
// runs them must import bench/peers, which registers the modules with
// Caddy.
var peerPolicies = []string{"peer_sglang", "peer_llmd", "peer_kubeai", "peer_vllmstack", "peer_dynamo", "peer_dynamo_approx"}

// kvEventPolicies are the selection policies that consume the engines' KV
// events: their runs start engines with engine.Config.KVEvents on, as
// Dynamo's vLLM workers run with --kv-events-config. peer_dynamo, fed
// them, knows every engine's cache exactly: the reference for what an
// approximate index costs.
var kvEventPolicies = map[string]bool{"peer_dynamo": true}

// timedPeers are the peers with periods or lifetimes, and so a
// time_scale option (KubeAI has none).
var timedPeers = map[string]bool{"peer_sglang": true, "peer_llmd": true, "peer_vllmstack": true, "peer_dynamo": true, "peer_dynamo_approx": true}

func init() {
	for _, name := range peerPolicies {
		knownPolicies[name] = Policy{
			Name:      name,
			Selection: json.RawMessage(`{"policy":"` + name + `"}`),
			KVEvents:  kvEventPolicies[name],
		}
	}
}

// scalePeerTime sets the time_scale of p, the object of the selection
// policy name, when it is a timed peer that does not set one, so that the peers' periods and lifetimes
// (SGLang's eviction interval, llm-d's metrics refresh, Dynamo's
// approximate TTL, the vLLM stack's request-rate window) run in the
// engines' simulated time, as prefix_cache's prefill_rate does.
func scalePeerTime(name string, p map[string]any, timeScale float64) {
	if _, set := p["time_scale"]; timedPeers[name] && !set {
		p["time_scale"] = timeScale
	}
}
