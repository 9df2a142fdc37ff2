package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var (
	alertFor    = regexp.MustCompile(`(?m)^\s+for:\s*(\S+)\s*$`)
	alertLink   = regexp.MustCompile(`docs/operations\.md#([a-z0-9-]+)`)
	docHeading  = regexp.MustCompile(`(?m)^#{2,3} (.+)$`)
	docForValue = regexp.MustCompile("`for: ([0-9a-z]+)`")
)

// Every alert has its section in docs/operations.md, under a heading
// named as the alert, which its description links to and which states
// the rule's own `for` window: an alert added, renamed or given another
// window without its docs fails here.
func TestAlertsDocumented(t *testing.T) {
	rules, err := os.ReadFile("prometheus/alerts.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{} // heading -> its text up to the next heading
	hs := docHeading.FindAllStringSubmatchIndex(string(doc), -1)
	for i, h := range hs {
		end := len(doc)
		if i+1 < len(hs) {
			end = hs[i+1][0]
		}
		sections[string(doc[h[2]:h[3]])] = string(doc[h[1]:end])
	}
	r := string(rules)
	as := alertName.FindAllStringSubmatchIndex(r, -1)
	if len(as) == 0 {
		t.Fatal("alerts.rules.yml: no alert")
	}
	for i, a := range as {
		name := r[a[2]:a[3]]
		end := len(r)
		if i+1 < len(as) {
			end = as[i+1][0]
		}
		def := r[a[1]:end]
		section, ok := sections[name]
		if !ok {
			t.Errorf("%s: docs/operations.md has no section \"### %s\"", name, name)
			continue
		}
		f := alertFor.FindStringSubmatch(def)
		if f == nil {
			t.Errorf("%s: no `for:` in alerts.rules.yml", name)
		} else if d := docForValue.FindStringSubmatch(section); d == nil || d[1] != f[1] {
			t.Errorf("%s: the rule waits for: %s; its section in docs/operations.md says %v", name, f[1], d)
		}
		l := alertLink.FindStringSubmatch(def)
		if l == nil || l[1] != strings.ToLower(name) {
			t.Errorf("%s: its annotations link to %v, want docs/operations.md#%s", name, l, strings.ToLower(name))
		}
		if !strings.Contains(def, "severity:") {
			t.Errorf("%s: no severity label", name)
		}
	}
}
