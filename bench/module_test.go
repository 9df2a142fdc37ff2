package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNoModuleOfItsOwn holds the reason bench is not a Go module of its
// own (README.md, "One module"): every module bench's packages and tests
// need, the plugin's own packages and tests need too, so a bench module
// would take nothing out of the plugin's go.mod. A dependency only bench
// uses fails this test: then a module of its own is worth weighing again.
func TestNoModuleOfItsOwn(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the go command is not on PATH: %v", err)
		}
		t.Skipf("skipped: the go command is not on PATH: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	goList := func(args ...string) []string {
		t.Helper()
		cmd := exec.Command(goBin, append([]string{"list"}, args...)...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return strings.Fields(string(out))
	}
	var benchPkgs, pluginPkgs []string
	for _, p := range goList("./...") {
		if strings.HasSuffix(p, "/bench") || strings.Contains(p, "/bench/") {
			benchPkgs = append(benchPkgs, p)
		} else {
			pluginPkgs = append(pluginPkgs, p)
		}
	}
	if len(benchPkgs) == 0 || len(pluginPkgs) == 0 {
		t.Fatalf("go list ./... gave %d bench and %d other packages, want both", len(benchPkgs), len(pluginPkgs))
	}
	modules := func(pkgs []string) []string {
		return goList(append([]string{"-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}"}, pkgs...)...)
	}
	plugin := modules(pluginPkgs)
	var only []string
	for _, m := range modules(benchPkgs) {
		if !slices.Contains(plugin, m) && !slices.Contains(only, m) {
			only = append(only, m)
		}
	}
	if len(only) > 0 {
		t.Errorf("bench needs modules the plugin's packages do not: %v", only)
	}
}
