package main

import (
	"os"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

func TestMain(m *testing.M) {
	// The redis fault runs two edges: this binary, re-executed.
	driver.ServeEdgeIfChild()
	os.Exit(m.Run())
}
