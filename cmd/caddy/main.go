// Command caddy is Caddy with its standard modules and the prefix_cache
// load-balancing policy, for `go build ./cmd/caddy` without xcaddy.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	// plug in Caddy modules here
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/prefixcache/caddy-prefixcache"
)

func main() {
	caddycmd.Main()
}
