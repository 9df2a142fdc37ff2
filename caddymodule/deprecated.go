package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(deprecatedMatchModel{})
}

// deprecatedMatchModel is MatchModel under its first name,
// http.matchers.model (Caddyfile `model`): a name any LLM plugin would
// want, which a plugin should not take. It works as before and logs a
// deprecation when loaded.
type deprecatedMatchModel MatchModel

// CaddyModule returns the Caddy module information.
func (deprecatedMatchModel) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.matchers.model",
		New: func() caddy.Module { return new(deprecatedMatchModel) },
	}
}

// Deprecated names the module that replaces this one.
func (deprecatedMatchModel) Deprecated() string { return "http.matchers.prefix_cache_model" }

// UnmarshalCaddyfile is MatchModel's.
func (m *deprecatedMatchModel) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return (*MatchModel)(m).UnmarshalCaddyfile(d)
}

// UnmarshalJSON is MatchModel's: a list of patterns, or an object.
func (m *deprecatedMatchModel) UnmarshalJSON(b []byte) error {
	return (*MatchModel)(m).UnmarshalJSON(b)
}

// MarshalJSON is MatchModel's.
func (m deprecatedMatchModel) MarshalJSON() ([]byte, error) { return MatchModel(m).MarshalJSON() }

// Provision logs the deprecation and checks the patterns.
func (m deprecatedMatchModel) Provision(ctx caddy.Context) error {
	ctx.Logger().Warn("the model matcher is deprecated: it is now prefix_cache_model (http.matchers.prefix_cache_model), which works the same",
		zap.Strings("patterns", m.Patterns))
	return MatchModel(m).Provision(ctx)
}

// Match is MatchModel's.
func (m deprecatedMatchModel) Match(r *http.Request) bool { return MatchModel(m).Match(r) }

// MatchWithError is MatchModel's.
func (m deprecatedMatchModel) MatchWithError(r *http.Request) (bool, error) {
	return MatchModel(m).MatchWithError(r)
}

// Interface guards
var (
	_ caddy.Provisioner                 = deprecatedMatchModel{}
	_ caddyhttp.RequestMatcherWithError = deprecatedMatchModel{}
	_ caddyfile.Unmarshaler             = (*deprecatedMatchModel)(nil)
)
