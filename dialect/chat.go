package dialect

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// This file renders the message-based dialects: OpenAI chat completions and
// Anthropic Messages share one code path (the union of their shapes), and
// the OpenAI Responses API reuses its parts.
//
// Renderers take the offset of a value and return the offset after it. An
// object's members are rendered as they are met when the members that
// must precede them in the text have been rendered (a message's role
// before its content, a part's type before its text), which is how clients
// write them, so the large values are scanned once. Otherwise, or if a
// member is duplicated, the object's rendering is redone from the recorded
// spans in canonical order.

// tools renders the tools section: the raw bytes of a non-empty tools
// array. Raw bytes are stable for one client (one serialiser), and tools are
// defined once per application, so decoding them would buy nothing.
func (p *parser) tools(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	end, err := skipValue(b, i)
	if err != nil {
		return dst, 0, err
	}
	switch b[i] {
	case 'n':
		return dst, end, nil
	case '[':
		j := skipWS(b, i+1)
		if b[j] == ']' {
			return dst, end, nil
		}
		if b[j] == '{' {
			has, err := p.hasKey(j, fInputSchema)
			if err != nil {
				return dst, 0, err
			}
			if has {
				p.anthropic = true // Anthropic tool definitions
			}
		}
	}
	dst = put(p, dst, "\x1ctools\x1f") // FS "tools" US
	return put(p, dst, b[i:end]), end, nil
}

// hasKey reports whether the object at b[i], already skipped once, has a
// member named key. Its only error is errCut.
func (p *parser) hasKey(i int, key field) (bool, error) {
	m, err := p.members(i)
	for ; err == nil && m.more; err = m.next(p, err) {
		if m.ve, err = p.skip(m.vs); err == nil && m.k == key {
			return true, nil
		}
	}
	if err == errCut {
		return false, err
	}
	return false, nil
}

// messages renders the messages array at b[i].
func (p *parser) messages(dst []byte, i int) ([]byte, int, error) {
	if p.b[i] != '[' {
		return dst, 0, shapeErr(i, "messages is not an array")
	}
	e, err := p.elements(i)
	for ; err == nil && e.more; err = e.next(p, err) {
		dst, e.ve, err = p.message(dst, e.i)
	}
	return dst, e.i, err
}

// openMessage starts a message: RS role US.
func (p *parser) openMessage(dst []byte, role string) []byte {
	dst = p.putByte(dst, sepRole)
	dst = put(p, dst, role)
	p.inText = false
	return p.putByte(dst, sepUnit)
}

// header renders RS role US for the role string at b[i], reports whether
// the role is "user" and returns the offset after the role.
func (p *parser) header(dst []byte, i int) ([]byte, bool, int, error) {
	dst = p.putByte(dst, sepRole)
	rs := len(dst)
	dst, end, err := p.str(dst, i)
	// Past the limit the role is not all rendered, so this may be wrong,
	// but the placement key ending there is clamped to the limit anyway.
	user := string(dst[rs:]) == "user"
	p.inText = false
	return p.putByte(dst, sepUnit), user, end, err
}

// message renders the chat or Anthropic message object at b[i]: header,
// content, tool_calls, function_call.
func (p *parser) message(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	if b[i] != '{' {
		return dst, 0, shapeErr(i, "message is not an object")
	}
	ms := p.pos(dst)
	var f fields
	var header, user, contentDone, callsDone bool
	m, err := p.members(i)
	for ; err == nil && m.more; err = m.next(p, err) {
		k := f.of(m.k)
		switch {
		case k == fRole && !f.redo && !header && b[m.vs] == '"':
			dst, user, m.ve, err = p.header(dst, m.vs)
			header = true
		case k == fContent && !f.redo && header && !contentDone:
			dst, m.ve, err = p.content(dst, m.vs)
			contentDone = true
		case k == fToolCalls && !f.redo && contentDone && !callsDone:
			dst, m.ve, err = p.toolCalls(dst, m.vs)
			callsDone = true
		default:
			m.ve, err = p.skip(m.vs)
		}
		f.at[k] = span{m.vs, m.ve}
	}
	if err != nil {
		return dst, 0, err
	}
	if f.redo {
		if err = p.redo(m.i - i); err != nil {
			return dst, 0, err
		}
		dst = p.reset(dst, ms)
		header, contentDone, callsDone = false, false, false
	}
	if role := f.at[fRole]; !header {
		if !role.ok() || b[role.s] != '"' {
			return dst, 0, shapeErr(m.i, "message has no string role")
		}
		if dst, user, _, err = p.header(dst, role.s); err != nil {
			return dst, 0, err
		}
	}
	if v := f.at[fContent]; !contentDone && v.ok() {
		if dst, _, err = p.content(dst, v.s); err != nil {
			return dst, 0, err
		}
	}
	if v := f.at[fToolCalls]; !callsDone && v.ok() {
		if dst, _, err = p.toolCalls(dst, v.s); err != nil {
			return dst, 0, err
		}
	}
	if v := f.at[fFunctionCall]; v.ok() && !isNull(b, v) {
		if dst, err = p.functionCall(dst, v.s); err != nil {
			return dst, 0, err
		}
	}
	if user && p.placement < 0 {
		p.placement = p.pos(dst) - p.start
	}
	return dst, m.i, nil
}

// content renders a message's content at b[i]: a string, null, or an array
// of parts (objects, or strings taken as text).
func (p *parser) content(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	switch b[i] {
	case '"':
		return p.text(dst, i)
	case 'n':
		end, err := skipLiteral(b, i, "null")
		return dst, end, err
	case '[':
	default:
		return dst, 0, shapeErr(i, "content is not a string, an array or null")
	}
	e, err := p.elements(i)
	for ; err == nil && e.more; err = e.next(p, err) {
		switch b[e.i] {
		case '"':
			dst, e.ve, err = p.text(dst, e.i)
		case '{':
			dst, e.ve, err = p.part(dst, e.i)
		default:
			if _, err = skipValue(b, e.i); err == nil {
				err = shapeErr(e.i, "content part is not an object")
			}
		}
	}
	return dst, e.i, err
}

// text renders the string at b[i] as a text item, joined to a preceding
// text item of the same message with "\n".
func (p *parser) text(dst []byte, i int) ([]byte, int, error) {
	if p.inText {
		dst = p.putByte(dst, '\n')
	}
	p.inText = true
	return p.str(dst, i)
}

// part renders the content part object at b[i]. The payload of a text,
// tool_result or thinking part is rendered when met if the type came
// before it; everything else is rendered from spans at the end.
func (p *parser) part(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	obj, ps, inText := i, p.pos(dst), p.inText
	var f fields
	t := tNone
	done := false
	m, err := p.members(i)
	for ; err == nil && m.more; err = m.next(p, err) {
		k := f.of(m.k)
		eager := !done && !f.redo
		switch {
		case k == fType:
			t, m.ve, err = p.typeAt(m.vs)
		case k == fText && eager && t == tText && b[m.vs] == '"':
			dst, m.ve, err = p.text(dst, m.vs)
			done = true
		case k == fContent && eager && t == tToolResult && !p.nested:
			dst, m.ve, err = p.toolResult(dst, m.vs)
			done = true
		case k == fThinking && eager && t == tThinking && b[m.vs] == '"':
			dst, m.ve, err = p.thinking(dst, m.vs)
			done = true
		default:
			m.ve, err = p.skip(m.vs)
		}
		f.at[k] = span{m.vs, m.ve}
	}
	if err != nil {
		return dst, 0, err
	}
	end := m.i
	if done && !f.redo {
		return dst, end, nil
	}
	if f.redo {
		if err = p.redo(end - obj); err != nil {
			return dst, 0, err
		}
	}
	dst, p.inText = p.reset(dst, ps), inText
	switch t {
	case tText:
		if v := f.at[fText]; v.ok() && b[v.s] == '"' {
			dst, _, err = p.text(dst, v.s)
			return dst, end, err
		}
	case tImageURL: // OpenAI chat: {"url": "..."} or, from some clients, the URL itself
		if v, err := p.field(f.at[fImageURL], fURL); err != nil || v.ok() {
			return p.digestPart(dst, "image", v, end, err)
		}
	case tInputImage: // OpenAI Responses
		if v := f.at[fImageURL]; v.ok() && b[v.s] == '"' {
			return p.digestPart(dst, "image", v, end, nil)
		}
		if v := f.at[fFileID]; v.ok() && b[v.s] == '"' {
			return p.digestPart(dst, "image", v, end, nil)
		}
	case tImage: // Anthropic: {"source": {"type": "base64", "data": ...} | {"url": ...} | {"file_id": ...}}
		p.anthropic = true
		if v, err := p.field(f.at[fSource], fData, fURL, fFileID); err != nil || v.ok() {
			return p.digestPart(dst, "image", v, end, err)
		}
	case tInputAudio: // OpenAI chat: {"data": base64, "format": "wav"}
		if v, err := p.field(f.at[fInputAudio], fData); err != nil || v.ok() {
			return p.digestPart(dst, "audio", v, end, err)
		}
	case tToolUse: // Anthropic
		p.anthropic = true
		dst, err = p.toolCall(dst, f.at[fName], f.at[fInput])
		return dst, end, err
	case tToolResult: // Anthropic
		p.anthropic = true
		if !p.nested {
			if v := f.at[fContent]; v.ok() {
				dst, _, err = p.toolResult(dst, v.s)
			} else {
				dst = p.openPart(dst, "tool_result")
				dst = p.closePart(dst, p.pos(dst))
			}
			return dst, end, err
		}
	case tThinking: // Anthropic
		if v := f.at[fThinking]; v.ok() && b[v.s] == '"' {
			dst, _, err = p.thinking(dst, v.s)
			return dst, end, err
		}
		p.anthropic = true
	case tAnthropic:
		p.anthropic = true
	}
	// Any other part (or a known type in an unexpected shape): its type and
	// a digest of its members.
	dst, err = p.digestItem(dst, f.at[fType], obj)
	return dst, end, err
}

// field returns v if it is a string, or, if v is an object, the span of
// its first string member named by the first of keys that names one; the
// zero span otherwise. It reads the object once, whatever the number of
// keys (at most 3). Its only error is errCut.
func (p *parser) field(v span, keys ...field) (span, error) {
	b := p.b
	if !v.ok() || b[v.s] != '{' {
		if v.ok() && b[v.s] == '"' {
			return v, nil
		}
		return span{}, nil
	}
	var found [3]span
	m, err := p.members(v.s)
	for ; err == nil && m.more; err = m.next(p, err) {
		if m.ve, err = p.skip(m.vs); err != nil || b[m.vs] != '"' {
			continue
		}
		for j, k := range keys {
			if !found[j].ok() && m.k == k {
				found[j] = span{m.vs, m.ve}
			}
		}
		if found[0].ok() {
			return found[0], nil
		}
	}
	if err == errCut {
		return span{}, err
	}
	// Another error ends the search, as the end of the object does: the
	// spans found before it count.
	for j := range keys {
		if found[j].ok() {
			return found[j], nil
		}
	}
	return span{}, nil
}

// digestPart renders a part whose payload is the digest of the unescaped
// string v (an image URL, base64 data or a file id), unless err (finding
// v's) is set: then it returns err.
func (p *parser) digestPart(dst []byte, label string, v span, end int, err error) ([]byte, int, error) {
	if err != nil {
		return dst, 0, err
	}
	dst, h, err := p.stringDigest(dst, v)
	if err != nil {
		return dst, 0, err
	}
	dst = p.openPart(dst, label)
	at := p.pos(dst)
	return p.closePart(p.putDigest(dst, h), at), end, nil
}

// stringDigest returns the xxh3 digest of the unescaped contents of the
// string value v, unescaping into dst's spare room if it has escapes (some
// serialisers write "/" in base64 as "\/"). dst's length is unchanged.
// Past the limit it does nothing (the digest is 0).
func (p *parser) stringDigest(dst []byte, v span) ([]byte, uint64, error) {
	b := p.b
	if len(dst) >= p.lim {
		return dst, 0, nil
	}
	if !hasEscape(b, v.s, v.e) {
		return dst, xxh3.Hash(b[v.s+1 : v.e-1]), nil
	}
	n := len(dst)
	tmp, _, err := appendString(dst, b, v.s)
	if err != nil {
		return dst, 0, err
	}
	return tmp[:n], xxh3.Hash(tmp[n:]), nil
}

// membersDigest digests the members of the object at b[i] other than
// "type" and "cache_control", independently of their order: the sum of
// xxh3(raw value) seeded by xxh3(unescaped key). A key too long for
// readName to unescape is unescaped into dst's spare room (dst's length
// is unchanged).
//
// It is the one member loop outside the walks (walk.go), which it cannot
// use: it needs the keys' bytes, not their field, and must not spend the
// budget, since only a rendering below the limit computes digests and
// Append and AppendLimit must spend alike (the renderer that read the
// object has spent a unit for each member already).
func (p *parser) membersDigest(dst []byte, i int) uint64 {
	b := p.b
	var h uint64
	i, more, err := firstMember(b, i)
	for more && err == nil {
		k, vs, ve, err2 := member(b, i, &p.kbuf)
		if err2 != nil {
			break
		}
		if s := string(k); s != "type" && s != "cache_control" {
			seed := xxh3.Hash(k)
			if k == nil { // escaped, and longer than maxName
				tmp, _, _ := appendString(dst, b, i)
				seed = xxh3.Hash(tmp[len(dst):])
			}
			h += xxh3.HashSeed(b[vs:ve], seed)
		}
		i, more, err = nextMember(b, ve)
	}
	return h
}

// digestItem renders a part or item of another type: GS type US 8 digest,
// with the unescaped type typ (if it is a string) as the label and the
// digest of the members of the object at b[obj] as the payload.
func (p *parser) digestItem(dst []byte, typ span, obj int) ([]byte, error) {
	p.inText = false
	dst = p.putByte(dst, sepPart)
	if typ.ok() && p.b[typ.s] == '"' {
		var err error
		if dst, _, err = p.str(dst, typ.s); err != nil {
			return dst, err
		}
	}
	if len(dst) >= p.lim {
		p.over += 13
		return dst, nil
	}
	dst = put(p, dst, "\x1f\x08\x00\x00\x00") // US, length 8
	return p.putDigest(dst, p.membersDigest(dst, obj)), nil
}

// putDigest appends h, 8 bytes little-endian, as put does.
func (p *parser) putDigest(dst []byte, h uint64) []byte {
	if p.lim-len(dst) >= 8 {
		return binary.LittleEndian.AppendUint64(dst, h)
	}
	var a [8]byte
	binary.LittleEndian.PutUint64(a[:], h)
	return put(p, dst, a[:])
}

// openPart renders GS label US and a 4-byte length placeholder that
// closePart fills in. The payload begins at len(result).
func (p *parser) openPart(dst []byte, label string) []byte {
	dst = p.putByte(dst, sepPart)
	dst = put(p, dst, label)
	dst = put(p, dst, "\x1f\x00\x00\x00\x00") // US, the length
	if p.over < 4 {
		p.exact++ // the length is written: its payload must be measured exactly
	}
	p.inText = false
	return dst
}

// closePart sets the length of the part whose payload begins at position
// at: as much of it as was written.
func (p *parser) closePart(dst []byte, at int) []byte {
	n := uint32(p.pos(dst) - at)
	if at <= len(dst) {
		binary.LittleEndian.PutUint32(dst[at-4:], n)
	} else if at-4 < len(dst) {
		var a [4]byte
		binary.LittleEndian.PutUint32(a[:], n)
		copy(dst[at-4:], a[:])
	}
	if at-4 < len(dst) {
		p.exact--
	}
	p.inText = false
	return dst
}

// thinking renders an Anthropic thinking block's text at b[i].
func (p *parser) thinking(dst []byte, i int) ([]byte, int, error) {
	p.anthropic = true
	dst = p.openPart(dst, "thinking")
	at := p.pos(dst)
	dst, end, err := p.str(dst, i)
	return p.closePart(dst, at), end, err
}

// toolResult renders an Anthropic tool result's content at b[i] (a string
// or text and image blocks) as a tool_result part.
func (p *parser) toolResult(dst []byte, i int) ([]byte, int, error) {
	p.anthropic = true
	dst = p.openPart(dst, "tool_result")
	at := p.pos(dst)
	p.nested = true
	dst, end, err := p.content(dst, i)
	p.nested = false
	return p.closePart(dst, at), end, err
}

// toolCall renders GS "tool_call" US len name US arguments. A string
// arguments value (OpenAI) is unescaped; an object (Anthropic "input") is
// rendered as its raw bytes, stable for one client.
func (p *parser) toolCall(dst []byte, name, args span) ([]byte, error) {
	b := p.b
	dst = p.openPart(dst, "tool_call")
	at := p.pos(dst)
	var err error
	if name.ok() && b[name.s] == '"' {
		if dst, _, err = p.str(dst, name.s); err != nil {
			return dst, err
		}
	}
	dst = p.putByte(dst, sepUnit)
	if args.ok() && !isNull(b, args) {
		if b[args.s] == '"' {
			if dst, _, err = p.str(dst, args.s); err != nil {
				return dst, err
			}
		} else {
			dst = put(p, dst, b[args.s:args.e])
		}
	}
	return p.closePart(dst, at), nil
}

// toolCalls renders the OpenAI tool_calls value at b[i]:
// [{"id", "type": "function", "function": {"name", "arguments"}}].
func (p *parser) toolCalls(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	switch b[i] {
	case 'n':
		end, err := skipLiteral(b, i, "null")
		return dst, end, err
	case '[':
	default:
		return dst, 0, shapeErr(i, "tool_calls is not an array")
	}
	e, err := p.elements(i)
	for ; err == nil && e.more; err = e.next(p, err) {
		if b[e.i] != '{' {
			return dst, 0, shapeErr(e.i, "tool call is not an object")
		}
		var f fields
		if e.ve, err = p.spans(e.i, &f); err != nil {
			break
		}
		if fn := f.at[fFunction]; fn.ok() && b[fn.s] == '{' {
			dst, err = p.functionCall(dst, fn.s)
		} else {
			dst, err = p.digestItem(dst, f.at[fType], e.i)
		}
	}
	return dst, e.i, err
}

// functionCall renders the {"name", "arguments"} object at b[i] as a tool
// call.
func (p *parser) functionCall(dst []byte, i int) ([]byte, error) {
	if p.b[i] != '{' {
		return dst, shapeErr(i, "function call is not an object")
	}
	var f fields
	if _, err := p.spans(i, &f); err != nil {
		return dst, err
	}
	return p.toolCall(dst, f.at[fName], f.at[fArguments])
}
