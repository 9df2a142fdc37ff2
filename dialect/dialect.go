package dialect

import (
	"errors"
	"strconv"
)

// Kind is the API dialect of a request body, recognised from its JSON shape.
type Kind uint8

// The dialects Append recognises.
const (
	Unknown     Kind = iota // not a known shape (only with an error)
	Chat                    // OpenAI chat completions: "messages"
	Completions             // OpenAI (legacy) completions: "prompt"
	Responses               // OpenAI Responses: "input" / "instructions"
	Messages                // Anthropic Messages: "messages" with Anthropic shapes
	Generate                // SGLang /generate: "text" / "input_ids"
)

var kindNames = [...]string{
	Unknown:     "unknown",
	Chat:        "openai_chat",
	Completions: "openai_completions",
	Responses:   "openai_responses",
	Messages:    "anthropic_messages",
	Generate:    "sglang_generate",
}

// String returns the dialect's name, one of a fixed set suitable as a metric
// label value: "unknown", "openai_chat", "openai_completions",
// "openai_responses", "anthropic_messages", "sglang_generate".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return kindNames[Unknown]
}

// Request is what Append learns about a request besides its routing text.
type Request struct {
	// Kind is the recognised dialect.
	Kind Kind
	// Model is the raw contents of the top-level "model" string: a
	// sub-slice of the body, escapes left as they are. Nil if absent or
	// not a string.
	Model []byte
	// CacheSalt is the raw contents of the top-level "cache_salt" string
	// (vLLM's per-tenant cache isolation), like Model. Nil if absent.
	CacheSalt []byte
	// Placement is the length of the placement key: the first Placement
	// bytes of the appended text. For chat-like dialects it ends after the
	// first user message; otherwise it is the whole text. AppendLimit
	// clamps it to the text it appended.
	Placement int
	// TextLen is the length of the whole routing text: what Append
	// appends. AppendLimit reports it exactly if the text is within its
	// limit, and an upper bound otherwise (escaped bytes past the limit
	// count as written).
	TextLen int
}

// Errors returned by Append, to be matched with errors.Is. The returned
// errors wrap them with the byte offset and a description of the problem;
// they never contain body text.
var (
	// ErrNotJSON: the body does not begin with a JSON value (empty,
	// form data, binary, compressed, ...).
	ErrNotJSON = errors.New("dialect: body is not JSON")
	// ErrSyntax: the body looks like JSON but is malformed or truncated.
	ErrSyntax = errors.New("dialect: malformed JSON")
	// ErrUnknownDialect: the body is JSON but not of a known request shape.
	ErrUnknownDialect = errors.New("dialect: unknown request shape")
)

// parseError wraps one of the sentinel errors with an offset and a fixed
// description.
type parseError struct {
	err error  // ErrNotJSON, ErrSyntax or ErrUnknownDialect
	off int    // byte offset in the body
	msg string // a constant from this package, never body text
}

func (e *parseError) Error() string {
	return e.err.Error() + " at byte " + strconv.Itoa(e.off) + ": " + e.msg
}

func (e *parseError) Unwrap() error { return e.err }

func syntaxErr(off int, msg string) error {
	return &parseError{err: ErrSyntax, off: off, msg: msg}
}

func shapeErr(off int, msg string) error {
	return &parseError{err: ErrUnknownDialect, off: off, msg: msg}
}

// span is a value's bytes in the body, b[s:e]. The zero span is absent
// (no value inside an object starts at offset 0).
type span struct{ s, e int }

func (v span) ok() bool { return v.e > 0 }

// Control bytes of the routing text format (see the package doc).
const (
	sepTokens = 0x1a // SUB: a run of 4-byte little-endian token ids follows
	sepTools  = 0x1c // FS: before the tools section
	sepPart   = 0x1d // GS: before a non-text part
	sepRole   = 0x1e // RS: before a message's role; between batch prompts
	sepUnit   = 0x1f // US: after a role or part label
)

// Append appends the routing text of the request body to dst and returns
// the extended slice and what it learned about the request. The body is
// only read, never modified; Request.Model and Request.CacheSalt alias it.
//
// On error, Append returns dst unchanged, a zero Request and an error
// matching ErrNotJSON, ErrSyntax or ErrUnknownDialect.
//
// Append does not allocate when dst has room for the text. Unlike the
// built-in append, it may overwrite the bytes of dst's spare capacity
// beyond the returned length (a word at a time, for speed): pass a buffer
// whose spare capacity holds nothing else.
func Append(dst, body []byte) ([]byte, Request, error) {
	return AppendLimit(dst, body, -1)
}

// AppendLimit is Append that appends only the first limit bytes of the
// routing text (all of it if it is shorter, or if limit is negative): byte
// for byte the first bytes Append appends. Its Request is Append's, except
// that Placement is clamped to the appended length and TextLen is an upper
// bound past the limit; its errors are Append's, except that an invalid
// escape in a string past the limit may go unseen (see "Limited rendering"
// in the package doc for exactly what differs).
//
// Past the limit, strings are skipped rather than unescaped, digests are
// not computed and raw bytes are not copied: a body whose text is much
// longer than limit costs about what skipping it costs. The whole body is
// still parsed as Append parses it.
//
// Its writes to dst's spare capacity are bounded by the limit: a few
// sections of at most limit + 3 bytes each (the text's top-level members
// are rendered where they are met, then put in order); a body with one
// text member (messages, input or prompt alone) needs limit + 3 bytes of
// room.
func AppendLimit(dst, body []byte, limit int) ([]byte, Request, error) {
	if limit < 0 {
		limit = maxInt
	}
	p := parser{b: body, limit: limit}
	out, req, err := p.top(dst)
	if err != nil {
		return dst, Request{}, err
	}
	if n := len(out) - len(dst); req.Placement < 0 || req.Placement > n {
		req.Placement = n
	}
	return out, req, nil
}
