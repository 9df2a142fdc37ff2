package caddymodule

import (
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
// (not a POST, not JSON, compressed, incremental, larger than 4 MiB, over
// the body budget) or names no model matches no pattern, so it goes to
// the routes after, such as a default pool.
type MatchModel []string

// CaddyModule returns the Caddy module information.
func (MatchModel) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.matchers.prefix_cache_model",
		New: func() caddy.Module { return new(MatchModel) },
	}
}

// UnmarshalCaddyfile sets up the matcher from Caddyfile tokens. Syntax:
//
//	prefix_cache_model <patterns...>
func (m *MatchModel) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	for d.Next() { // the matcher's name, once per use in a matcher block
		args := d.RemainingArgs()
		if len(args) == 0 {
			return d.ArgErr()
		}
		*m = append(*m, args...)
	}
	return nil
}

// Provision checks the patterns.
func (m MatchModel) Provision(caddy.Context) error {
	for _, p := range m {
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
// error, so the request goes on to the routes after.
func (m MatchModel) MatchWithError(r *http.Request) (bool, error) {
	model, ok := modelOf(r)
	if !ok {
		return false, nil
	}
	for _, p := range m {
		if globMatch(p, model) {
			return true, nil
		}
	}
	return false, nil
}

// modelOf returns the model the body of r names, reading the body into
// the request's record the first time (the policy finds it there).
func modelOf(r *http.Request) (string, bool) {
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
		return "", false
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
	return p.model, p.model != ""
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
