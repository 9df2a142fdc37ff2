// Command xcaddybuild builds a caddy binary from the xcaddy.json manifest
// with xcaddy as a library, then checks that the binary lists every module
// the manifest says this repository provides.
//
//	go run ./tools/xcaddybuild -manifest xcaddy.json -o caddy
//
// (run from tools/xcaddybuild, its own module, so that xcaddy never
// becomes a dependency of the plugin: `cd tools/xcaddybuild && go run .
// -manifest ../../xcaddy.json -o ../../caddy`.) CI builds with the README's
// xcaddy command instead and runs this with -check on the result.
//
// The manifest uses xcaddy's own Builder field names (caddy_version,
// plugins, replacements, build_flags, ...) plus "modules": the Caddy module
// IDs the build must contain. Relative replacement paths are taken from
// the manifest's folder.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/caddyserver/xcaddy"
)

// localVersion is the pseudo-version the go command gives a module that a
// replace directive points at a local folder.
const localVersion = "v0.0.0-00010101000000-000000000000"

// manifest is xcaddy.json.
type manifest struct {
	xcaddy.Builder
	// Modules are the Caddy module IDs this repository provides.
	Modules []string `json:"modules"`
}

func main() {
	manifestPath := flag.String("manifest", "xcaddy.json", "the build manifest")
	out := flag.String("o", "caddy", "where to write the binary")
	checkOnly := flag.Bool("check", false, "only check an existing binary at -o")
	flag.Parse()

	if err := run(*manifestPath, *out, *checkOnly); err != nil {
		log.Fatal(err)
	}
}

func run(manifestPath, out string, checkOnly bool) error {
	m, err := load(manifestPath)
	if err != nil {
		return err
	}
	out, err = filepath.Abs(out)
	if err != nil {
		return err
	}
	if !checkOnly {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := m.Build(ctx, out); err != nil {
			return fmt.Errorf("building caddy: %w", err)
		}
	}
	return check(out, m.Modules)
}

// load reads the manifest and makes its local replacement paths absolute.
func load(path string) (*manifest, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m manifest
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	if m.CaddyVersion == "" {
		return nil, fmt.Errorf("%s: caddy_version is required", path)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	local := map[string]bool{}
	for i, r := range m.Replacements {
		p := string(r.New)
		if strings.HasPrefix(p, ".") || filepath.IsAbs(p) {
			m.Replacements[i].New = xcaddy.ReplacementPath(filepath.Join(dir, p))
			local[string(r.Old)] = true
		}
	}
	// A plugin built from a local folder has no published version, and
	// `go get` of it without one asks the module proxy for its latest.
	// Name the version Go itself writes for a replaced module instead.
	for i, p := range m.Plugins {
		if p.Version == "" && local[p.PackagePath] {
			m.Plugins[i].Version = localVersion
		}
	}
	return &m, nil
}

// check runs `caddy list-modules` and reports the manifest's modules that
// the binary lacks.
func check(binary string, modules []string) error {
	listed, err := exec.Command(binary, "list-modules").Output()
	if err != nil {
		return fmt.Errorf("running %s list-modules: %w", binary, err)
	}
	have := map[string]bool{}
	for _, line := range strings.Split(string(listed), "\n") {
		have[strings.TrimSpace(line)] = true
	}
	var missing []string
	for _, id := range modules {
		if !have[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s list-modules lacks %s", binary, strings.Join(missing, ", "))
	}
	for _, id := range modules {
		fmt.Printf("%s: has %s\n", filepath.Base(binary), id)
	}
	return nil
}
