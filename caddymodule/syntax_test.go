package caddymodule_test

import (
	"os"
	"strings"
	"testing"
)

// The Caddyfile syntax the README shows is the one UnmarshalCaddyfile's
// doc comment holds, option for option: an option added to one and not
// the other fails here.
func TestREADMESyntaxMatchesTheDocComment(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "\n## Syntax\n")
	if !ok {
		t.Fatal("README has no Syntax section")
	}
	_, block, ok := strings.Cut(after, "```caddy\n")
	if !ok {
		t.Fatal("README's Syntax section has no caddy block")
	}
	block, _, _ = strings.Cut(block, "```")

	src, err := os.ReadFile("caddyfile.go")
	if err != nil {
		t.Fatal(err)
	}
	_, doc, ok := strings.Cut(string(src), "// UnmarshalCaddyfile sets up the module from Caddyfile tokens. Syntax:\n//\n")
	if !ok {
		t.Fatal("caddyfile.go: UnmarshalCaddyfile's doc comment has no Syntax block")
	}
	var lines []string
	for _, l := range strings.Split(doc, "\n") {
		rest, ok := strings.CutPrefix(l, "//\t")
		if !ok {
			break
		}
		lines = append(lines, rest)
	}
	if got := strings.Join(lines, "\n") + "\n"; got != block {
		t.Errorf("the README's syntax block and UnmarshalCaddyfile's doc comment differ:\nREADME:\n%s\ndoc comment:\n%s", block, got)
	}
}
