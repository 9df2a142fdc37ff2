package prefixcache_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// docFiles returns the Markdown files an operator reads: the top level's,
// docs/'s (at any depth) and examples/'s, read at test time whatever
// their layout.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("examples/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, more...)
	err = filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if !slices.Contains(files, "README.md") {
		t.Fatalf("no README.md among %v", files)
	}
	return files
}

// snippet is a fenced block of a Markdown file.
type snippet struct {
	file string
	line int      // of the opening fence
	info []string // the fence's info string: language, then words
	text string
	// fragment: the line just above the fence is an HTML comment
	// (invisible once rendered) with the word "fragment" in it.
	fragment bool
}

var fence = regexp.MustCompile("^(\\s*)(```+)(.*)$")

// snippets returns the fenced blocks of a Markdown file, indented ones
// (in a list item) included, their indentation removed.
func snippets(file, md string) []snippet {
	var out []snippet
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, ticks := m[1], m[2]
		s := snippet{file: file, line: i + 1, info: strings.Fields(m[3])}
		if i > 0 {
			above := strings.TrimSpace(lines[i-1])
			words := strings.FieldsFunc(above, func(r rune) bool { return !unicode.IsLetter(r) })
			s.fragment = strings.HasPrefix(above, "<!--") && strings.HasSuffix(above, "-->") &&
				slices.Contains(words, fragmentWord)
		}
		var body []string
		for i++; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == ticks {
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		s.text = strings.Join(body, "\n") + "\n"
		out = append(out, s)
	}
	return out
}

// fragmentWord marks a Caddyfile snippet that is not meant to adapt (a
// syntax summary with <placeholders>, say): the line just above its fence
// is the HTML comment "<!-- fragment -->" (more words may follow, saying
// why), which no renderer shows.
const fragmentWord = "fragment"

// snippetEnv is the environment snippets adapt with, for their
// {$NAME} placeholders without a default.
var snippetEnv = map[string]string{
	"UPSTREAMS": "127.0.0.1:8001 127.0.0.1:8002",
	"LISTEN":    ":8080",
	"NAME":      "example",
}

// wrapSnippet makes a Caddyfile of a snippet the way a reader would use
// it: a global options block or a site (its first token an address) as
// it is; HTTP directives and named matchers in a site; anything else
// (lb_policy, health_uri, ...) in a site's reverse_proxy block.
func wrapSnippet(text string) string {
	tokens, err := caddyfile.Tokenize([]byte(text), "snippet")
	if err != nil || len(tokens) == 0 {
		return text
	}
	first := tokens[0].Text
	switch {
	case first == "{", isAddress(first):
		return text
	case strings.HasPrefix(first, "@"), caddyfileDirective(first):
		return ":8080 {\n" + text + "}\n"
	default:
		return ":8080 {\nreverse_proxy 127.0.0.1:9 {\n" + text + "}\n}\n"
	}
}

// isAddress tells a site address (example.com, :443, http://x,
// localhost, {$LISTEN}) from a directive name.
func isAddress(tok string) bool {
	return strings.ContainsAny(tok, ".:/") || tok == "localhost" || strings.HasPrefix(tok, "{$")
}

// caddyfileDirective reports whether name is an HTTP Caddyfile directive
// (Caddy's or a plugin's): httpcaddyfile has no exported list, but a
// registered directive adapts in a site block and an unknown one fails
// with "unrecognized directive".
func caddyfileDirective(name string) bool {
	_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(":8080 {\n"+name+"\n}\n"), nil)
	return err == nil || !strings.Contains(err.Error(), "unrecognized directive")
}

// TestDocsCaddyfilesAdapt adapts, with Caddy's Caddyfile adapter and this
// repository's modules registered, every ```caddy or ```caddyfile block
// of the docs (wrapped by wrapSnippet where it is a part of a Caddyfile)
// and every shipped Caddyfile. A block with "<!-- fragment -->" on the
// line above its fence is skipped.
func TestDocsCaddyfilesAdapt(t *testing.T) {
	for k, v := range snippetEnv {
		t.Setenv(k, v)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	checked, skipped := 0, 0
	for _, file := range docFiles(t) {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range snippets(file, string(raw)) {
			if len(s.info) == 0 || (s.info[0] != "caddy" && s.info[0] != "caddyfile") {
				continue
			}
			if s.fragment {
				skipped++
				continue
			}
			checked++
			if _, _, err := adapter.Adapt([]byte(wrapSnippet(s.text)), map[string]any{"filename": s.file}); err != nil {
				t.Errorf("%s:%d: the Caddyfile block does not adapt: %v\n(if it is not meant to, put \"<!-- %s -->\" on the line above its fence)\n%s",
					s.file, s.line, err, fragmentWord, s.text)
			}
		}
	}
	files, err := filepath.Glob("examples/*.Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range append([]string{"Caddyfile.example"}, files...) {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		if _, _, err := adapter.Adapt(raw, map[string]any{"filename": file}); err != nil {
			t.Errorf("%s does not adapt: %v", file, err)
		}
	}
	if checked < 2 {
		t.Fatalf("checked %d Caddyfiles: the docs have lost their examples, or this test its way to them", checked)
	}
	t.Logf("adapted %d Caddyfiles, skipped %d fragments", checked, skipped)
}

// moduleID finds this repository's Caddy module IDs in prose: dotted
// names with a prefix_cache segment, in backticks.
var moduleID = regexp.MustCompile("`((?:http|admin|caddy|tls|events|layer4|dns)\\.[a-z0-9_.]*prefix_cache[a-z0-9_.]*)`")

// TestDocsCiteRegisteredModules checks that every module ID the docs name
// (in backticks) is registered: a renamed module cited under its old name
// fails here unless the old name is still registered (deprecated).
func TestDocsCiteRegisteredModules(t *testing.T) {
	registered := map[string]bool{}
	for _, id := range caddy.Modules() {
		registered[id] = true
	}
	cited := 0
	for _, file := range docFiles(t) {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, m := range moduleID.FindAllStringSubmatch(line, -1) {
				id := strings.TrimSuffix(m[1], ".")
				if isPlaceholderOrVar(id) {
					continue
				}
				cited++
				if !registered[id] && !isNamespace(id, registered) {
					t.Errorf("%s:%d cites module %s, which is not registered", file, i+1, id)
				}
			}
		}
	}
	if cited == 0 {
		t.Fatal("the docs cite no module ID")
	}
	t.Logf("%d module IDs cited", cited)
}

// isPlaceholderOrVar tells placeholders and vars
// (http.reverse_proxy.prefix_cache.reason, http.vars.prefix_cache.request)
// from module IDs.
func isPlaceholderOrVar(id string) bool {
	for _, p := range []string{"http.reverse_proxy.prefix_cache.", "http.vars.", "http.request."} {
		if strings.HasPrefix(id+".", p) {
			return true
		}
	}
	return false
}

// isNamespace reports whether id is the namespace of a registered module
// (http.prefix_cache.sync, of http.prefix_cache.sync.redis).
func isNamespace(id string, registered map[string]bool) bool {
	for r := range registered {
		if strings.HasPrefix(r, id+".") {
			return true
		}
	}
	return false
}
