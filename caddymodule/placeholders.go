package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// Placeholders set on every selection, for access logs and headers:
//
//	{http.reverse_proxy.prefix_cache.reason}         match, spill, cold, ... or fallback
//	{http.reverse_proxy.prefix_cache.skip}           why the body was not routed on (fallback only)
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
	preferred   string
	chosen      string
	spilled     bool
	bound       int
	byteBound   int64
	coldBound   int
	id          prefixindex.ID // the chosen upstream's
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

func setSkipPlaceholders(r *http.Request, cause skipCause) {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return
	}
	repl.Set(placeholderPrefix+"reason", "fallback")
	repl.Set(placeholderPrefix+"skip", cause.String())
}
