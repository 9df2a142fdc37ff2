package prefixcache_test

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	_ "github.com/prefixcache/caddy-prefixcache"
)

// The README's module list and xcaddy.json's modules are the modules this
// repository registers, deprecated names left out: a module added,
// renamed or dropped without them fails here.
func TestModuleListsMatchRegistered(t *testing.T) {
	var current, deprecated []string
	for _, id := range caddy.Modules() {
		info, err := caddy.GetModule(id)
		if err != nil {
			t.Fatal(err)
		}
		mod := info.New()
		typ := reflect.TypeOf(mod)
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if !strings.HasPrefix(typ.PkgPath(), "github.com/prefixcache/caddy-prefixcache/") {
			continue
		}
		if _, ok := mod.(interface{ Deprecated() string }); ok {
			deprecated = append(deprecated, id)
			continue
		}
		current = append(current, id)
	}
	slices.Sort(current)
	if len(current) == 0 {
		t.Fatal("no module of this repository is registered")
	}

	raw, err := os.ReadFile("xcaddy.json")
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Modules []string `json:"modules"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	slices.Sort(manifest.Modules)
	if !slices.Equal(manifest.Modules, current) {
		t.Errorf("xcaddy.json lists %v, the registered modules are %v", manifest.Modules, current)
	}

	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := readmeModuleList(string(readme))
	if listed == nil {
		t.Fatal("README has no module list: a Markdown list of \"- `ID`: what\" lines, one per module")
	}
	slices.Sort(listed)
	if !slices.Equal(listed, current) {
		t.Errorf("README lists %v, the registered modules are %v (deprecated: %v)", listed, current, deprecated)
	}
}

// listedModule is a line of the README's module list: "- `ID`: what",
// ID a module ID of this repository (a prefix_cache name).
var listedModule = regexp.MustCompile("^[-*] `([a-z0-9_]+(?:\\.[a-z0-9_]+)*)`")

// readmeModuleList returns the IDs of the README's module list, the
// first run of consecutive list lines naming module IDs with a
// prefix_cache segment, wherever the README puts it and however it
// introduces it; nil if there is none.
func readmeModuleList(readme string) []string {
	var listed []string
	for _, l := range strings.Split(readme, "\n") {
		m := listedModule.FindStringSubmatch(l)
		if m != nil && strings.Contains(m[1], ".") && strings.Contains(m[1], "prefix_cache") {
			listed = append(listed, m[1])
			continue
		}
		if listed != nil {
			break
		}
	}
	return listed
}
