package main

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// `caddy list-modules` of this binary prints caddy.Modules() of the
// packages main links: every module xcaddy.json builds in (and the README
// lists, TestModuleListsMatchRegistered) is among them, so `go build
// ./cmd/caddy` and the xcaddy build carry the same modules.
func TestListModulesHasTheManifest(t *testing.T) {
	raw, err := os.ReadFile("../../xcaddy.json")
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Modules []string `json:"modules"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Modules) == 0 {
		t.Fatal("xcaddy.json lists no module")
	}
	listed := caddy.Modules()
	for _, id := range manifest.Modules {
		if !slices.Contains(listed, id) {
			t.Errorf("caddy list-modules lacks %s (in xcaddy.json): cmd/caddy does not link the package that registers it", id)
		}
	}
}
