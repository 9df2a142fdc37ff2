package bench

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Citation forms of the markdown: a link's target, a path from the
// repository's root into bench/results (in prose or a command), and,
// inside bench/results, a file's bare name in backticks.
var (
	linkRe = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	rootRe = regexp.MustCompile(`bench/results/[A-Za-z0-9_.*?\[\]{},/+-]*`)
	bareRe = regexp.MustCompile("`([A-Za-z0-9_.+/-]+\\.(?:json|md|log|svg|txt|pprof))`")
	// placeholderRe finds a name's upper-case placeholder, as in
	// WORKLOAD-eN-SYNC-sSEED.json.
	placeholderRe = regexp.MustCompile(`[A-Z]{3,}`)
	resultDir     = "bench/results"
)

// TestCitedResultsExist reads every markdown file of the repository and
// checks that each path it cites under bench/results names a file or a
// non-empty directory, and each glob matches a file.
func TestCitedResultsExist(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, resultDir)); err != nil {
		t.Fatalf("no %s under %s: %v", resultDir, root, err)
	}
	var docs []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			docs = append(docs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, doc := range docs {
		for _, c := range citations(t, root, doc) {
			checked++
			if !exists(root, c.path) {
				t.Errorf("%s cites %s (%q), which does not exist", doc, c.path, c.as)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d citations of bench/results, want the docs' many: is the reading of them broken?", checked)
	}
	t.Logf("%d citations of bench/results in %d markdown files", checked, len(docs))
}

type citation struct {
	path string // from the repository's root, maybe a glob
	as   string // as the document wrote it
}

// citations returns doc's citations that land in bench/results.
func citations(t *testing.T, root, doc string) []citation {
	b, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	dir := path.Dir(doc)
	inResults := strings.HasPrefix(doc, resultDir+"/")
	var out []citation
	add := func(p, as string) {
		p = path.Clean(p)
		if p == resultDir || strings.HasPrefix(p, resultDir+"/") {
			out = append(out, citation{p, as})
		}
	}
	for _, m := range linkRe.FindAllStringSubmatch(text, -1) {
		target, _, _ := strings.Cut(m[1], "#")
		if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		add(path.Join(dir, target), m[1])
	}
	for _, m := range rootRe.FindAllString(text, -1) {
		m = strings.TrimRight(m, ".,")
		// A link's text, [bench/results/x](...), ends in a bracket the
		// path never opened.
		for strings.HasSuffix(m, "]") && strings.Count(m, "]") > strings.Count(m, "[") {
			m = strings.TrimSuffix(m, "]")
		}
		for _, p := range expandBraces(m) {
			add(p, m)
		}
	}
	if inResults {
		for _, m := range bareRe.FindAllStringSubmatch(text, -1) {
			if placeholderRe.MatchString(m[1]) {
				continue // a pattern of names, e.g. KNOB.md
			}
			// A bare name is a file beside the document, in a
			// directory beside it ("commit.txt in each"), or a path
			// from bench/results.
			p := path.Join(dir, m[1])
			if !exists(root, p) {
				p = path.Join(dir, "*", m[1])
			}
			if !exists(root, p) {
				p = path.Join(resultDir, m[1])
			}
			add(p, m[1])
		}
	}
	return out
}

// exists reports whether p, from root, is a file or a non-empty
// directory, or, as a glob, matches a file.
func exists(root, p string) bool {
	full := filepath.Join(root, filepath.FromSlash(p))
	if strings.ContainsAny(p, "*?[") {
		m, err := filepath.Glob(full)
		return err == nil && len(m) > 0
	}
	fi, err := os.Stat(full)
	if err != nil {
		return false
	}
	if !fi.IsDir() {
		return true
	}
	entries, err := os.ReadDir(full)
	return err == nil && len(entries) > 0
}

// expandBraces expands the shell's {a,b} alternatives of p.
func expandBraces(p string) []string {
	i := strings.IndexByte(p, '{')
	j := strings.IndexByte(p, '}')
	if i < 0 || j < i {
		return []string{strings.NewReplacer("{", "", "}", "").Replace(p)}
	}
	var out []string
	for _, alt := range strings.Split(p[i+1:j], ",") {
		out = append(out, expandBraces(p[:i]+alt+p[j+1:])...)
	}
	return out
}
