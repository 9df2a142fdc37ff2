package caddymodule

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/prefixcache/caddy-prefixcache/fleet"
)

func init() {
	caddy.RegisterModule(UsageHandler{})
	registerUsageDirective()
}

// UsageHandler reads what the engine that served a request says it had
// cached: usage.prompt_tokens_details.cached_tokens of an OpenAI-style
// answer (JSON, or the usage chunk of an SSE stream), or
// cache_read_input_tokens of an Anthropic one. A selection policy never
// sees the response; this handler, in front of the reverse_proxy whose
// lb_policy is prefix_cache, hands each answer's usage to the policy
// that routed the request, which counts the engines' real hits against
// its predictions (metrics, admin stats).
//
// The response is passed through unchanged and unbuffered: each write
// goes to the client first and is scanned after, for a few byte
// patterns. An answer without usage (a stream whose client did not ask
// for stream_options.include_usage, an error) teaches nothing.
//
// Caddyfile, in the site block (ordered before reverse_proxy):
//
//	prefix_cache_usage
type UsageHandler struct{}

// CaddyModule returns the Caddy module information.
func (UsageHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.prefix_cache_usage",
		New: func() caddy.Module { return new(UsageHandler) },
	}
}

// ServeHTTP scans the response the rest of the route writes and, once it
// is written, gives its usage to the policies that routed the request.
// It does so also when reverse_proxy aborts the response (it panics with
// http.ErrAbortHandler), as it does when the client leaves a stream
// before its end: a client that stops at [DONE] has had the usage chunk.
func (UsageHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	uw := &usageWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}}
	defer func() {
		if u := uw.scan.usage(); u.ok() {
			if p, _ := caddyhttp.GetVar(r.Context(), varKey).(*peeked); p != nil {
				p.answered(u)
			}
		}
	}()
	return next.ServeHTTP(uw, r)
}

// answered gives each policy instance that routed the request what the
// engine said it had cached, once the response is written.
func (p *peeked) answered(u usage) {
	p.mu.Lock()
	views := slices.Clone(p.views)
	p.mu.Unlock()
	for _, v := range views {
		id, routed, uncached := v.charge.last()
		if id == 0 || routed <= 0 {
			continue // not routed by this instance
		}
		st := v.owner.state
		o := st.fleet.Answered(id, fleet.Answer{
			PromptTokens: u.prompt, CachedTokens: u.cached,
			RoutedBytes: routed, PredictedBytes: routed - uncached,
		})
		metrics.answered(u, o)
		if v.aged {
			st.fleet.LearnCapacity(st.index, id, v.age, o)
		}
	}
}

// usageWriter passes the response through and scans JSON and SSE bodies
// for usage.
type usageWriter struct {
	*caddyhttp.ResponseWriterWrapper
	decided bool // whether to scan is decided, at the first write
	scanOn  bool
	scan    usageScanner
}

func (w *usageWriter) Write(b []byte) (int, error) {
	if !w.decided {
		w.decided = true
		// An encoded body (gzip from the engine) has no readable keys.
		w.scanOn = scannable(w.Header().Get("Content-Type")) && w.Header().Get("Content-Encoding") == ""
	}
	n, err := w.ResponseWriter.Write(b)
	if w.scanOn {
		w.scan.write(b[:n])
	}
	return n, err
}

// ReadFrom copies through Write, so that a copy the underlying writer
// would make by itself is scanned too.
func (w *usageWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{w}, r)
}

// writerOnly hides usageWriter's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

// scannable reports whether a response of this Content-Type carries
// usage: JSON answers and SSE streams.
func scannable(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/event-stream" || mt == "application/x-ndjson"
}

// usage is what an answer said about its prompt: tokens in all, and
// how many the engine had cached. -1 is not said.
type usage struct {
	prompt, cached int64
}

func (u usage) ok() bool { return u.prompt > 0 && u.cached >= 0 && u.cached <= u.prompt }

// The keys the scanner reads: OpenAI's usage.prompt_tokens and
// usage.prompt_tokens_details.cached_tokens (chat and completions; vLLM,
// SGLang, TGI and llama.cpp's server answer with them), the Responses
// API's input_tokens and input_tokens_details.cached_tokens, and
// Anthropic's input_tokens, cache_read_input_tokens and
// cache_creation_input_tokens, whose sum is the prompt. Each ends in
// `_tokens"`, which the scanner looks for.
const (
	keyPrompt = iota
	keyCached
	keyInput
	keyCacheRead
	keyCacheCreation
	numKeys
)

var usageKeys = [numKeys][]byte{
	keyPrompt:        []byte(`"prompt_tokens"`),
	keyCached:        []byte(`"cached_tokens"`),
	keyInput:         []byte(`"input_tokens"`),
	keyCacheRead:     []byte(`"cache_read_input_tokens"`),
	keyCacheCreation: []byte(`"cache_creation_input_tokens"`),
}

var tokensQuote = []byte(`_tokens"`)

// scanWindow is how much of a write is kept for the next: enough for the
// longest key, a colon, some whitespace and a 19-digit number, so that
// a key and its value split across writes are seen whole.
const scanWindow = 96

// usageScanner finds the last value of each key in a byte stream. Inside
// a JSON string a quote is escaped, so `"cached_tokens":` in generated
// text reads `\"cached_tokens\":` and never matches: only real keys do.
type usageScanner struct {
	vals  [numKeys]int64 // -1 until seen
	seen  bool
	carry [scanWindow]byte
	nc    int
	joint [2 * scanWindow]byte
}

// write scans b, a continuation of what write saw before.
func (s *usageScanner) write(b []byte) {
	if !s.seen {
		s.seen = true
		for i := range s.vals {
			s.vals[i] = -1
		}
	}
	if len(b) == 0 {
		return
	}
	// The joint of the previous write and this one, where a key or its
	// value may be split. A key scanned twice sets the same value twice.
	if s.nc > 0 {
		j := append(s.joint[:0], s.carry[:s.nc]...)
		j = append(j, b[:min(len(b), scanWindow)]...)
		s.find(j)
	}
	s.find(b)
	if len(b) >= scanWindow {
		s.nc = copy(s.carry[:], b[len(b)-scanWindow:])
	} else {
		keep := min(s.nc, scanWindow-len(b))
		copy(s.carry[:], s.carry[s.nc-keep:s.nc])
		s.nc = keep + copy(s.carry[keep:], b)
	}
}

// find sets the values of the keys whose value ends within b.
func (s *usageScanner) find(b []byte) {
	for off := 0; ; {
		i := bytes.Index(b[off:], tokensQuote)
		if i < 0 {
			return
		}
		end := off + i + len(tokensQuote) // just past the key's closing quote
		off = end
		for k, key := range usageKeys {
			if end < len(key) || !bytes.Equal(b[end-len(key):end], key) {
				continue
			}
			if v, ok := numberAfter(b[end:]); ok {
				s.vals[k] = v
			}
			break
		}
	}
}

// numberAfter parses `: <digits>` at the start of b, the digits ended by
// a character that is not one (a number cut off by the end of b is not
// read: the next write's joint has it whole).
func numberAfter(b []byte) (int64, bool) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	if i >= len(b) || b[i] != ':' {
		return 0, false
	}
	i++
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' && i-start < 19 {
		i++
	}
	if i == start || i >= len(b) || (b[i] >= '0' && b[i] <= '9') {
		return 0, false
	}
	v, err := strconv.ParseInt(string(b[start:i]), 10, 64)
	return v, err == nil
}

// usage is what the stream said, the last value of each key winning (a
// stream with usage in every chunk ends with the final one).
func (s *usageScanner) usage() usage {
	if !s.seen {
		return usage{-1, -1}
	}
	v := s.vals
	if v[keyPrompt] >= 0 {
		return usage{prompt: v[keyPrompt], cached: max(v[keyCached], 0)}
	}
	switch {
	case v[keyInput] >= 0 && (v[keyCacheRead] >= 0 || v[keyCacheCreation] >= 0):
		// Anthropic: input_tokens are the tokens after the last cache
		// breakpoint; the prompt is all three.
		read, created := max(v[keyCacheRead], 0), max(v[keyCacheCreation], 0)
		return usage{prompt: v[keyInput] + read + created, cached: read}
	case v[keyInput] >= 0:
		// OpenAI Responses: input_tokens and
		// input_tokens_details.cached_tokens.
		return usage{prompt: v[keyInput], cached: max(v[keyCached], 0)}
	}
	return usage{-1, -1}
}

// Interface guards
var (
	_ caddyhttp.MiddlewareHandler = UsageHandler{}
	_ caddyfile.Unmarshaler       = (*UsageHandler)(nil)
	_ http.ResponseWriter         = (*usageWriter)(nil)
	_ io.ReaderFrom               = (*usageWriter)(nil)
)
