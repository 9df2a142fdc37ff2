package driver

import "encoding/json"

// The peer routers of bench/peers, known to ParsePolicies by name, each
// with its defaults. A command that runs them must import bench/peers,
// which registers the modules with Caddy.
func init() {
	for _, name := range []string{"peer_sglang", "peer_llmd", "peer_kubeai", "peer_vllmstack", "peer_dynamo"} {
		knownPolicies[name] = Policy{Name: name, Selection: json.RawMessage(`{"policy":"` + name + `"}`)}
	}
}
