package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/prefixcache/caddy-prefixcache/dialect"
)

func init() {
	caddy.RegisterModule(MatchModel{})
}

// MatchModel matches requests by the model their body names: the
// top-level "model" of an OpenAI chat completions, completions or
// Responses body, or of an Anthropic Messages body. One site can then
// send each model to its own pool, each with its own prefix_cache policy:
//
//	@big prefix_cache_model llama-3.1-70b*
//	reverse_proxy @big 10.0.0.11:8000 10.0.0.12:8000 {
//		lb_policy prefix_cache
//	}
//
// Patterns are whole model names, in which * stands for any run of
// characters (slashes included: "meta-llama/*" matches every model of
// that organisation). The body is read once per request, shared with the
// prefix_cache policy (the same read, the same request variable), and
// reaches the upstream byte for byte. A request whose body is not read
// (not a POST, not JSON, compressed, incremental, larger than 4 MiB) or
// names no model matches no pattern, so it goes to the routes after, such
// as a default pool.
//
// A body the edge does not read because the body budget is spent (many
// uploads at once, or clients that stall theirs) says nothing about the
// request: it fails open. A matcher with fail_open matches it, so an
// overloaded edge sends such requests to that pool (name one, the
// fleet's default model) instead of answering them as unknown models;
// without fail_open it matches no pattern, as above.
//
//	@big {
//		prefix_cache_model llama-3.1-70b* {
//			fail_open
//		}
//	}
//
// In JSON, a list of patterns, or an object with "patterns" and
// "fail_open".
type MatchModel struct {
	// Model names to match, in which * stands for any run of characters.
	Patterns []string `json:"patterns,omitempty"`

	// Also match a request whose body was not read because the body
	// budget is spent. Default: `false`.
	FailOpen bool `json:"fail_open,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (MatchModel) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.matchers.prefix_cache_model",
		New: func() caddy.Module { return new(MatchModel) },
	}
}

// UnmarshalCaddyfile sets up the matcher from Caddyfile tokens. Syntax:
//
//	prefix_cache_model <patterns...> {
//		fail_open
//	}
func (m *MatchModel) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	for d.Next() { // the matcher's name, once per use in a matcher block
		args := d.RemainingArgs()
		if len(args) == 0 {
			return d.ArgErr()
		}
		m.Patterns = append(m.Patterns, args...)
		for d.NextBlock(0) {
			switch d.Val() {
			case "fail_open":
				if d.NextArg() {
					return d.ArgErr()
				}
				m.FailOpen = true
			default:
				return d.Errf("unrecognized subdirective '%s'", d.Val())
			}
		}
	}
	return nil
}

// UnmarshalJSON accepts a list of patterns (the short form, which
// configurations without fail_open keep) or an object with its fields.
func (m *MatchModel) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '[' {
		*m = MatchModel{}
		return json.Unmarshal(b, &m.Patterns)
	}
	type plain MatchModel
	return json.Unmarshal(b, (*plain)(m))
}

// MarshalJSON writes a list of patterns when that says it all, so
// configurations without fail_open keep their shape.
func (m MatchModel) MarshalJSON() ([]byte, error) {
	if !m.FailOpen {
		return json.Marshal(m.Patterns)
	}
	type plain MatchModel
	return json.Marshal(plain(m))
}

// Provision checks the patterns.
func (m MatchModel) Provision(caddy.Context) error {
	if len(m.Patterns) == 0 {
		return fmt.Errorf("prefix_cache_model: no pattern")
	}
	for _, p := range m.Patterns {
		if p == "" {
			return fmt.Errorf("prefix_cache_model: empty pattern")
		}
	}
	return nil
}

// Match reports whether the request's body names a model matching one of
// the patterns.
func (m MatchModel) Match(r *http.Request) bool {
	match, _ := m.MatchWithError(r)
	return match
}

// MatchWithError is Match; a body it cannot read is no match, not an
// error, so the request goes on to the routes after, unless it was not
// read for lack of body budget and the matcher fails open.
func (m MatchModel) MatchWithError(r *http.Request) (bool, error) {
	model, ok, overloaded := modelOf(r)
	if !ok {
		return overloaded && m.FailOpen, nil
	}
	for _, p := range m.Patterns {
		if globMatch(p, model) {
			return true, nil
		}
	}
	return false, nil
}

// modelOf returns the model the body of r names, reading the body into
// the request's record the first time (the policy finds it there).
// overloaded reports a body not read for lack of body budget.
func modelOf(r *http.Request) (model string, ok, overloaded bool) {
	p, _ := caddyhttp.GetVar(r.Context(), varKey).(*peeked)
	if p == nil {
		// Not kept after it was sent: a prefix_cache policy that routes
		// this request says before the body is sent whether its retries
		// need it (route sets keep), and nothing else can send it again,
		// so a handler with a stock policy lets it go once the engine has
		// read it rather than hold it while the response streams.
		p = peekRequest(r, DefaultMaxBody, defaultBodyBudget(), false)
	}
	if p.skip != skipNone {
		return "", false, p.skip == skipBudget
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.modelRead {
		p.modelRead = true
		if p.buf.pin() {
			// A limit of 0 renders no text: only the top level is read.
			if _, req, err := dialect.AppendLimit(nil, p.body, 0); err == nil {
				p.model = string(req.Model)
			}
			p.buf.unpin()
		}
	}
	return p.model, p.model != "", false
}

// globMatch reports whether name matches pattern, in which * matches any
// run of characters, including none.
func globMatch(pattern, name string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == name
	}
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, part := range parts[1 : len(parts)-1] {
		i := strings.Index(name, part)
		if i < 0 {
			return false
		}
		name = name[i+len(part):]
	}
	return strings.HasSuffix(name, last)
}

// Interface guards
var (
	_ caddy.Provisioner                 = MatchModel{}
	_ caddyhttp.RequestMatcherWithError = MatchModel{}
	_ caddyfile.Unmarshaler             = (*MatchModel)(nil)
)
