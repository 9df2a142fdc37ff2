package redis

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestCaddyfile parses testdata/caddyfile/*.txt as the policy will: inside
// an lb_policy block, a sync subdirective whose first argument names the
// module, handed to caddyfile.UnmarshalModule like Caddy's own nested
// modules. Each file is a Caddyfile, a line of dashes, and the JSON the
// policy embeds (inline key "transport"), or the error's text.
func TestCaddyfile(t *testing.T) {
	files, err := filepath.Glob("testdata/caddyfile/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, want, ok := strings.Cut(string(raw), "----------\n")
			if !ok {
				t.Fatalf("%s: no ---------- line", file)
			}
			want = strings.TrimSpace(want)
			got, err := parsePolicySync(input)
			if !strings.HasPrefix(want, "{") {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("parsing %s = %s, %v; want an error containing %q", file, got, err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("parsing %s: %v", file, err)
			}
			var indented bytes.Buffer
			if err := json.Indent(&indented, got, "", "\t"); err != nil {
				t.Fatal(err)
			}
			if indented.String() != want {
				t.Errorf("parsing %s =\n%s\nwant\n%s", file, indented.String(), want)
			}
		})
	}
}

// parsePolicySync does what the policy's UnmarshalCaddyfile does with its
// sync subdirective, and returns the module's JSON.
func parsePolicySync(input string) (json.RawMessage, error) {
	d := caddyfile.NewTestDispenser(input)
	d.Next() // lb_policy
	d.Next() // prefix_cache
	var out json.RawMessage
	for d.NextBlock(0) {
		if d.Val() != "sync" {
			d.RemainingArgs()
			continue
		}
		if !d.NextArg() {
			return nil, d.ArgErr()
		}
		name := d.Val()
		unm, err := caddyfile.UnmarshalModule(d, "http.prefix_cache.sync."+name)
		if err != nil {
			return nil, err
		}
		out = caddyconfig.JSONModuleObject(unm, "transport", name, nil)
	}
	return out, nil
}

// TestCaddyfileJSONRoundTrip: the JSON the Caddyfile produces loads into
// the module with the same fields.
func TestCaddyfileJSONRoundTrip(t *testing.T) {
	raw, err := parsePolicySync("lb_policy prefix_cache {\n\tsync redis {\n\t\turl redis://h:1/2\n\t\tchannel c\n\t\tbuffer 7\n\t\ttimeout 2s\n\t}\n}")
	if err != nil {
		t.Fatal(err)
	}
	var tr Transport
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatalf("json.Unmarshal(%s) = %v", raw, err)
	}
	if tr.URL != "redis://h:1/2" || tr.Channel != "c" || tr.Buffer != 7 || time.Duration(tr.Timeout) != 2*time.Second {
		t.Errorf("json.Unmarshal(%s) = url %q channel %q buffer %d timeout %v", raw, tr.URL, tr.Channel, tr.Buffer, time.Duration(tr.Timeout))
	}
}
