package prefixcache_test

import (
	"encoding/json"
	"os"
	"reflect"
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
	_, list, ok := strings.Cut(string(readme), "The build provides these Caddy modules:\n\n")
	if !ok {
		t.Fatal("README has no module list (\"The build provides these Caddy modules:\")")
	}
	list, _, _ = strings.Cut(list, "\n\n")
	var listed []string
	for _, l := range strings.Split(list, "\n") {
		rest, ok := strings.CutPrefix(l, "- `")
		if !ok {
			t.Fatalf("README module list: line %q is not \"- `ID`: what\"", l)
		}
		id, _, _ := strings.Cut(rest, "`")
		listed = append(listed, id)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, current) {
		t.Errorf("README lists %v, the registered modules are %v (deprecated: %v)", listed, current, deprecated)
	}
}
