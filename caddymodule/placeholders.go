package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// Placeholders set on every selection, for access logs and headers:
//
//	{http.reverse_proxy.prefix_cache.reason}         match, spill, cold, ... or fallback
//	{http.reverse_proxy.prefix_cache.skip}           why the body was not routed on (fallback only, else empty)
//	{http.reverse_proxy.prefix_cache.dialect}        openai_chat, anthropic_messages, ...
//	{http.reverse_proxy.prefix_cache.prompt_bytes}   bytes of routing text
//	{http.reverse_proxy.prefix_cache.matched_bytes}  bytes of it the chosen upstream was believed to hold
//	{http.reverse_proxy.prefix_cache.preferred}      the upstream chosen without the load bound
//	{http.reverse_proxy.prefix_cache.upstream}       the upstream chosen
//	{http.reverse_proxy.prefix_cache.spilled}        whether the load bound moved the request
//
// None of them carries prompt text.
const placeholderPrefix = "http.reverse_proxy.prefix_cache."

// decision is what one selection explains about itself.
type decision struct {
	reason      string
	dialect     string
	promptBytes int
	matched     int
	depth       int // matched chunks
	preferred   string
	chosen      string
	spilled     bool
	bound       int
	byteBound   int64
	coldBound   int
	id          prefixindex.ID // the chosen upstream's
	// age is, with capacities, the chunks sent to the chosen upstream
	// since it was last sent the matched prefix (aged false: no match,
	// or no capacity to age by).
	age  uint32
	aged bool
}

func setPlaceholders(r *http.Request, d decision) {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return
	}
	repl.Set(placeholderPrefix+"reason", d.reason)
	repl.Set(placeholderPrefix+"skip", "")
	repl.Set(placeholderPrefix+"dialect", d.dialect)
	repl.Set(placeholderPrefix+"prompt_bytes", d.promptBytes)
	repl.Set(placeholderPrefix+"matched_bytes", d.matched)
	repl.Set(placeholderPrefix+"preferred", d.preferred)
	repl.Set(placeholderPrefix+"upstream", d.chosen)
	repl.Set(placeholderPrefix+"spilled", d.spilled)
}

// setFallbackPlaceholders sets the placeholders of a request the fallback
// policy placed: reason fallback, why, and the upstream it chose (empty
// when it chose none).
func setFallbackPlaceholders(r *http.Request, cause skipCause, u *reverseproxy.Upstream) {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return
	}
	var chosen string
	if u != nil {
		chosen = u.Dial
	}
	repl.Set(placeholderPrefix+"reason", "fallback")
	repl.Set(placeholderPrefix+"skip", cause.String())
	repl.Set(placeholderPrefix+"dialect", "")
	repl.Set(placeholderPrefix+"prompt_bytes", 0)
	repl.Set(placeholderPrefix+"matched_bytes", 0)
	repl.Set(placeholderPrefix+"preferred", chosen)
	repl.Set(placeholderPrefix+"upstream", chosen)
	repl.Set(placeholderPrefix+"spilled", false)
}
