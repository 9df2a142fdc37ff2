package fleet

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The model is pure Go: no file of the package imports Caddy, net/http
// or zap (DESIGN.md), so that it can be tested, and reasoned about,
// without a server.
func TestNoServerImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/caddyserver/") || strings.HasPrefix(path, "net/http") || strings.HasPrefix(path, "go.uber.org/zap") {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}
