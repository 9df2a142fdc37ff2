package caddymodule_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/caddyfile_adapt")

// TestCaddyfileAdapt adapts each testdata/caddyfile_adapt/*.caddyfiletest:
// a Caddyfile, a line of ten dashes, then the JSON Caddy makes of it, or
// the error it reports for an invalid one (files named error_*).
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/caddyfile_adapt/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".caddyfiletest")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, want, ok := strings.Cut(string(raw), "\n----------\n")
			if !ok {
				t.Fatalf("%s: no ---------- separator", file)
			}
			got := adapt(t, input, strings.HasPrefix(name, "error_"))
			if *update {
				if err := os.WriteFile(file, []byte(input+"\n----------\n"+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("adapting %s:\ngot:\n%s\nwant:\n%s", file, got, want)
			}
		})
	}
}

func adapt(t *testing.T, input string, wantErr bool) string {
	t.Helper()
	result, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(input), map[string]any{"filename": "Caddyfile"})
	if wantErr {
		if err == nil {
			t.Fatalf("adapting succeeded, want an error; got:\n%s", result)
		}
		return err.Error() + "\n"
	}
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, result, "", "\t"); err != nil {
		t.Fatal(err)
	}
	return pretty.String() + "\n"
}

// TestExamplesAdapt checks that every example Caddyfile in the repo adapts
// and provisions (as `caddy adapt --validate` does) with this module.
func TestExamplesAdapt(t *testing.T) {
	// examples/two-edges.Caddyfile asks operators for these;
	// Caddyfile.example has no default for its upstreams.
	t.Setenv("REDIS_PASSWORD", "test-secret")
	t.Setenv("PREFIX_CACHE_HASH_KEY", "test-secret-of-32-bytes-for-all")
	t.Setenv("UPSTREAMS", "127.0.0.1:8001")
	files, _ := filepath.Glob("../examples/*.Caddyfile")
	files = append(files, "../Caddyfile.example")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			result, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(raw, map[string]any{"filename": file})
			if err != nil {
				t.Fatalf("adapting %s: %v", file, err)
			}
			if !bytes.Contains(result, []byte(`"policy":"prefix_cache"`)) {
				t.Errorf("%s does not use the prefix_cache policy", file)
			}
			var cfg caddy.Config
			if err := json.Unmarshal(result, &cfg); err != nil {
				t.Fatal(err)
			}
			if err := caddy.Validate(&cfg); err != nil {
				t.Errorf("validating %s: %v", file, err)
			}
		})
	}
}
