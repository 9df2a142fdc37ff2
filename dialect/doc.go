// Package dialect turns an LLM API request body (JSON) into its routing
// text: a byte stream that renders the prompt in the order an engine's chat
// template sees it, and that is prefix-stable: the text of a conversation's
// first k messages is a byte prefix of the text of its first k+1 messages.
// The prefix index hashes the text in chained fixed-size chunks, so two
// requests share index entries for exactly as long as their prompts agree.
//
// The format below is a wire format: hashes of it are stored in the index
// (and agree between independent proxies), so changing it invalidates what
// every proxy has learned. Pin changes with the golden tests.
//
// # Dialects
//
// The dialect is recognised from the JSON shape of the top-level object,
// not from the URL:
//
//   - "messages": OpenAI chat completions ([Chat]) or Anthropic Messages
//     ([Messages]). Both are rendered by one code path; the Kind is
//     Messages if a top-level "system", "anthropic_version" or
//     "stop_sequences", a tool with "input_schema", or a content block of
//     an Anthropic-only type (image with source, tool_use, tool_result,
//     thinking, redacted_thinking, document, ...) is seen.
//   - otherwise "input" or "instructions": OpenAI Responses ([Responses]).
//   - otherwise "prompt": OpenAI completions ([Completions]).
//   - otherwise "text" (a string or an array) or "input_ids": SGLang
//     /generate ([Generate]).
//
// "model" and "cache_salt" are returned in [Request] (they seed the hash
// chain) and never enter the text. Every other member is ignored: stream,
// temperature, max_tokens, user, metadata, and anything unknown. Top-level
// members are located in one pass and rendered in the canonical order
// below, so member order does not matter; of duplicate members the last
// counts, as in encoding/json.
//
// # Text format
//
// Five control bytes structure the text:
//
//	SUB 0x1a  a run of token ids follows
//	FS  0x1c  the tools section follows
//	GS  0x1d  a non-text part follows
//	RS  0x1e  a message follows (or, in a prompt batch, the next prompt)
//	US  0x1f  ends a label
//
// Strings are rendered unescaped (\n, \", \uXXXX with surrogate pairs are
// decoded to UTF-8; a lone surrogate becomes U+FFFD), so one prompt
// serialised with different escaping has one text. Object keys and the
// values compared with names this package knows (part, item and tool call
// types, roles) are compared unescaped too, as a JSON decoder sees them:
// "te\u0078t" is a text part. Other bytes, including invalid UTF-8 and
// control bytes, are copied as they are: a prompt that itself contains the
// control bytes above can render like a different structure, which at
// worst routes it like that structure.
//
// Chat-like dialects (openai_chat, anthropic_messages, openai_responses):
//
//	text      = [tools] [system] *message
//	tools     = FS "tools" US <raw bytes of the "tools" value>
//	system    = RS "system" US content
//	message   = RS role US content *part
//	content   = *(text-item / part)
//	text-item = ["\n"] <unescaped string>
//	part      = GS label US len payload
//
// where:
//
//   - tools: the raw JSON of a non-empty, non-null "tools" array (one
//     client serialises its tool definitions the same way every time, and
//     they are part of the prompt an engine caches). Absent, null and []
//     render nothing.
//   - system: Anthropic's top-level "system" (a string or text blocks), or
//     the Responses "instructions" string. Chat system and developer
//     messages are ordinary messages.
//   - message: role is the unescaped "role". A string content is one text
//     item; an array content renders its parts in order; null renders
//     nothing. A text item directly after another text item of the same
//     message is preceded by "\n" (so "a\nb" and ["a", "b"] render alike,
//     as engines join text parts, and a string equals a one-block array,
//     as cache-control helpers rewrite the last message each turn).
//   - part: len is the payload's length, 4 bytes little-endian, so any text
//     may follow it. The payload of an "image" part is the 8-byte
//     little-endian xxh3 of the unescaped URL, base64 data or file id
//     (OpenAI image_url, Responses input_image, Anthropic image source);
//     of "audio", the same of input_audio data; of "tool_call", name US
//     arguments, for OpenAI tool_calls and legacy function_call (arguments
//     unescaped) and Anthropic tool_use (input as its raw JSON bytes); of
//     "tool_result", an Anthropic tool_result's content rendered as content
//     (empty if it has none); of "thinking", the unescaped thinking text.
//     A part of any other type (or of a known type in an unexpected shape)
//     is labelled with its unescaped "type" and its payload is an 8-byte
//     digest: the sum over its members other than "type" and
//     "cache_control" of xxh3(raw value, seed xxh3(unescaped key)),
//     independent of member order.
//   - OpenAI chat: role "tool" results are ordinary messages; assistant
//     tool_calls follow the message's content as tool_call parts.
//   - Responses: "input" as a string is one user message. Items: messages
//     (type "message" or no type) render as messages; function_call as
//     RS "assistant" US and a tool_call part; function_call_output as
//     RS "tool" US and its output as content; any other item as a digest
//     part.
//
// Nothing follows the last message, so a message renders the same whether
// it is the last or not.
//
// Prompt-like dialects (openai_completions, sglang_generate):
//
//	text   = prompt *(RS prompt)
//	prompt = <unescaped string> / SUB *id
//	id     = 4 bytes little-endian
//
// A string prompt is its text; an array of token ids is one token run; an
// array of strings or of token-id arrays is a batch, RS-separated. SGLang
// "text" renders before "input_ids" (and RS between them if both are
// given).
//
// # Placement key
//
// [Request].Placement is the length of the placement key, a prefix of the
// text. For chat-like dialects it runs through the end of the first user
// message, so a conversation's turns share it while conversations that
// share only a system prompt (or tools) do not; with no user message it is
// the whole text. For prompt-like dialects it is the whole text.
//
// # Errors and limits
//
// Append returns errors matching [ErrNotJSON], [ErrSyntax] or
// [ErrUnknownDialect]; they carry a byte offset, never body text. Append
// validates what it renders (strings and their escapes, token ids, the
// objects and arrays it reads, their keys and the types it compares) and,
// of values it skips, only what finding
// their end needs: strings are terminated and brackets balance (and match
// in kind to a depth of 64). Skipping is iterative, so nesting depth costs
// no stack; a tool result nested in a tool result is digested, not
// rendered, which bounds recursion. Other invalid JSON in skipped values
// is the engine's to reject.
//
// # Budget
//
// What a body costs to render is bounded, whatever its shape: the
// renderers spend a budget as they read, and a section whose budget is
// spent ends its text there. Each member of an object and each element of
// an array they read costs one unit (token ids excepted: they are the
// text); a value they skip costs one more per 16 bytes that skipping it
// examined one at a time (a container's bytes outside its strings, a
// scalar's bytes, one per search for a string's end), so a value read
// again costs again; and an object rendered again from its spans (one
// with a duplicate member) costs one more per 16 of its bytes. The
// sections before the turns (tools, system, instructions) share 65,536
// units, and the turns (messages, input, prompt, text, input_ids) another
// 65,536, so turns that spend theirs never change the text before them.
//
// The member, element, skip or redo that would exceed the budget ends the
// section's text where it is, possibly inside a message or a part (whose
// length then counts what was written); the rest of the section's value
// is only skipped, so errors in it are reported only as they are in
// skipped values. The budget is spent in body order, alike by Append and
// AppendLimit, and the first k turns of a conversation spend it alike
// whatever follows them, so the text stays prefix-stable: the text of
// more turns extends the text of fewer, or equals it once the budget is
// spent.
//
// Bodies from real clients spend 7,000 to 14,000 units per MiB (the chat,
// Anthropic and Responses bodies bench_test.go generates), so bodies of
// up to about 4.5 MiB of them are never cut; crafted ones spend up to
// 350,000 per MiB. A top-level object of more than 4,096 members is not a
// request (ErrUnknownDialect).
//
// # Limited rendering
//
// [AppendLimit] appends only the first limit bytes of the text, byte for
// byte those of Append (the prefix index hashes no more than max_chunks
// chunks). It parses the whole body as Append does, but past the limit
// (counted per top-level section: sections are rendered where they are
// met, then put in order) it writes nothing: strings are skipped as
// values are, digests are not computed, raw bytes are not copied; a part
// whose length prefix falls before the limit still measures its payload
// exactly, so the length written is Append's. What differs:
//
//   - [Request].TextLen is exact up to the limit and an upper bound past
//     it: a string skipped there counts its raw bytes, so each escape
//     adds 1 to 5 bytes (a "\n" 1, a "\u00e9" 4).
//   - An invalid escape (ErrSyntax "invalid escape", "invalid \u escape")
//     in a string skipped past the limit (not one measured exactly) is
//     not seen: AppendLimit succeeds where Append fails, or returns the
//     next error it meets (ErrSyntax or ErrUnknownDialect). Every other
//     error is Append's, offset and message included: strings are still
//     found to their closing quote. The text it returns lies before the
//     escape, so such a body is routed on valid text, and the engine
//     rejects the body.
//   - [Request].Placement is clamped to the appended text.
//
// # Speed
//
// Append runs on every proxied request, so it does not use encoding/json
// (0.1-0.25 GB/s on chat bodies, allocating per value) but a one-pass
// scanner over the body: members are rendered where they are met (a
// message's content right after its role; the top-level sections in body
// order, then moved into canonical order), and values that do not enter
// the text are skipped with bytes.IndexByte for strings and depth counting
// for containers; strings that enter the text are unescaped in one pass,
// eight bytes at a time. Chat bodies render at about 2-2.5 GB/s when the
// same body is rendered again and again, and at 1.3-1.6 GB/s on a stream
// of distinct bodies (the branch predictors cannot learn where their
// escapes are), and Append does not allocate when dst has room for the
// text. bench_test.go has the alternatives measured; BenchmarkAppend
// measures it (bench/overhead/micro.sh, docs/overhead.md).
//
// Crafted bodies cost more per byte, as much as the budget lets them.
// BenchmarkAdversarial measures the costliest shapes found by reading the
// renderers on 4 MiB bodies, in thread CPU time: a plain string renders
// at 0.47 ms per MiB of body whole, and 0.11 past the default render
// limit, where it is only validated; strings made of escaped quotes cost
// 6.8 ms/MiB past the limit (one search per quote), one-digit token ids
// 4.6, and every other shape at most 4.2, about what a real body of tiny
// messages or parts costs. The render budget (walk.go) is what keeps
// nested duplicate members from being read again and again.
package dialect
