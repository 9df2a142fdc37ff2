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
		if b[j] == '{' && hasKey(b, j, "input_schema") {
			p.anthropic = true // Anthropic tool definitions
		}
	}
	dst = put(p, dst, "\x1ctools\x1f") // FS "tools" US
	return put(p, dst, b[i:end]), end, nil
}

// hasKey reports whether the object at b[i], already skipped once, has a
// member named key.
func hasKey(b []byte, i int, key string) bool {
	var kbuf nameBuf
	i, more, err := firstMember(b, i)
	for more && err == nil {
		k, _, ve, err2 := member(b, i, &kbuf)
		if err2 != nil {
			return false
		}
		if string(k) == key {
			return true
		}
		i, more, err = nextMember(b, ve)
	}
	return false
}

// messages renders the messages array at b[i].
func (p *parser) messages(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	if b[i] != '[' {
		return dst, 0, shapeErr(i, "messages is not an array")
	}
	i, more, err := firstElement(b, i)
	for more && err == nil {
		if dst, i, err = p.message(dst, i); err == nil {
			i, more, err = nextElement(b, i)
		}
	}
	return dst, i, err
}

// openMessage starts a message: RS role US.
func (p *parser) openMessage(dst []byte, role string) []byte {
	dst = p.putByte(dst, sepRole)
	dst = put(p, dst, role)
	p.inText = false
	return p.putByte(dst, sepUnit)
}

// header renders RS role US for the role string at b[i] and reports
// whether the role is "user".
func (p *parser) header(dst []byte, i int) ([]byte, bool, error) {
	dst = p.putByte(dst, sepRole)
	rs := len(dst)
	dst, _, err := p.str(dst, i)
	// Past the limit the role is not all rendered, so this may be wrong,
	// but the placement key ending there is clamped to the limit anyway.
	user := string(dst[rs:]) == "user"
	p.inText = false
	return p.putByte(dst, sepUnit), user, err
}

// message renders the chat or Anthropic message object at b[i]: header,
// content, tool_calls, function_call.
func (p *parser) message(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	if b[i] != '{' {
		return dst, 0, shapeErr(i, "message is not an object")
	}
	ms := p.pos(dst)
	var role, content, toolCalls, functionCall span
	var header, user, contentDone, callsDone, slow bool
	i, more, err := firstMember(b, i)
	for more && err == nil {
		var key []byte
		var vs, ve int
		if key, vs, err = readKey(b, i, &p.kbuf); err != nil {
			return dst, 0, err
		}
		switch string(key) {
		case "role":
			slow = slow || role.ok()
			if ve, err = skipValue(b, vs); err == nil && !slow && !header && b[vs] == '"' {
				dst, user, err = p.header(dst, vs)
				header = true
			}
			role = span{vs, ve}
		case "content":
			slow = slow || content.ok()
			if !slow && header && !contentDone {
				dst, ve, err = p.content(dst, vs)
				contentDone = true
			} else {
				ve, err = skipValue(b, vs)
			}
			content = span{vs, ve}
		case "tool_calls":
			slow = slow || toolCalls.ok()
			if !slow && contentDone && !callsDone {
				dst, ve, err = p.toolCalls(dst, vs)
				callsDone = true
			} else {
				ve, err = skipValue(b, vs)
			}
			toolCalls = span{vs, ve}
		case "function_call":
			slow = slow || functionCall.ok()
			ve, err = skipValue(b, vs)
			functionCall = span{vs, ve}
		default:
			ve, err = skipValue(b, vs)
		}
		if err == nil {
			i, more, err = nextMember(b, ve)
		}
	}
	if err != nil {
		return dst, 0, err
	}
	end := i
	if slow {
		dst = p.reset(dst, ms)
		header, contentDone, callsDone = false, false, false
	}
	if !header {
		if !role.ok() || b[role.s] != '"' {
			return dst, 0, shapeErr(end, "message has no string role")
		}
		if dst, user, err = p.header(dst, role.s); err != nil {
			return dst, 0, err
		}
	}
	if !contentDone && content.ok() {
		if dst, _, err = p.content(dst, content.s); err != nil {
			return dst, 0, err
		}
	}
	if !callsDone && toolCalls.ok() {
		if dst, _, err = p.toolCalls(dst, toolCalls.s); err != nil {
			return dst, 0, err
		}
	}
	if functionCall.ok() && !isNull(b, functionCall) {
		if dst, err = p.functionCall(dst, functionCall.s); err != nil {
			return dst, 0, err
		}
	}
	if user && p.placement < 0 {
		p.placement = p.pos(dst) - p.start
	}
	return dst, end, nil
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
	i, more, err := firstElement(b, i)
	for more && err == nil {
		switch b[i] {
		case '"':
			dst, i, err = p.text(dst, i)
		case '{':
			dst, i, err = p.part(dst, i)
		default:
			if _, err = skipValue(b, i); err == nil {
				err = shapeErr(i, "content part is not an object")
			}
		}
		if err == nil {
			i, more, err = nextElement(b, i)
		}
	}
	return dst, i, err
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

// partFields are the spans of the content part members that some part type
// uses.
type partFields struct {
	typ, text, imageURL, inputAudio, source, name, input, content, thinking, fileID span
}

func isTextType(typ []byte) bool {
	switch string(typ) {
	case "text", "input_text", "output_text":
		return true
	}
	return false
}

// part renders the content part object at b[i]. The payload of a text,
// tool_result or thinking part is rendered when met if the type came
// before it; everything else is rendered from spans at the end.
func (p *parser) part(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	obj, ps, inText := i, p.pos(dst), p.inText
	var f partFields
	var tbuf nameBuf
	var typ []byte // the last type, unescaped (nil if not a string)
	var done, slow bool
	i, more, err := firstMember(b, i)
	for more && err == nil {
		var key []byte
		var vs, ve int
		if key, vs, err = readKey(b, i, &p.kbuf); err != nil {
			return dst, 0, err
		}
		var v *span
		eager := false
		switch string(key) {
		case "type":
			v = &f.typ
		case "text":
			v = &f.text
			eager = isTextType(typ) && b[vs] == '"'
		case "content":
			v = &f.content
			eager = string(typ) == "tool_result" && !p.nested
		case "thinking":
			v = &f.thinking
			eager = string(typ) == "thinking" && b[vs] == '"'
		case "image_url":
			v = &f.imageURL
		case "input_audio":
			v = &f.inputAudio
		case "source":
			v = &f.source
		case "name":
			v = &f.name
		case "input":
			v = &f.input
		case "file_id":
			v = &f.fileID
		}
		if v != nil && v.ok() {
			slow = true // a duplicate: the last one counts
		}
		if eager && !done && !slow {
			switch string(key) {
			case "text":
				dst, ve, err = p.text(dst, vs)
			case "content":
				dst, ve, err = p.toolResult(dst, vs)
			case "thinking":
				dst, ve, err = p.thinking(dst, vs)
			}
			done = true
		} else if v == &f.typ && b[vs] == '"' {
			typ, ve, err = readName(b, vs, &tbuf)
		} else {
			if v == &f.typ {
				typ = nil
			}
			ve, err = skipValue(b, vs)
		}
		if v != nil {
			*v = span{vs, ve}
		}
		if err == nil {
			i, more, err = nextMember(b, ve)
		}
	}
	if err != nil {
		return dst, 0, err
	}
	end := i
	if done && !slow {
		return dst, end, nil
	}
	dst, p.inText = p.reset(dst, ps), inText
	switch string(typ) {
	case "text", "input_text", "output_text":
		if f.text.ok() && b[f.text.s] == '"' {
			dst, _, err = p.text(dst, f.text.s)
			return dst, end, err
		}
	case "image_url": // OpenAI chat: {"url": "..."} or, from some clients, the URL itself
		if v := p.field(f.imageURL, "url"); v.ok() {
			return p.digestPart(dst, "image", v, end)
		}
	case "input_image": // OpenAI Responses
		if v := f.imageURL; v.ok() && b[v.s] == '"' {
			return p.digestPart(dst, "image", v, end)
		}
		if v := f.fileID; v.ok() && b[v.s] == '"' {
			return p.digestPart(dst, "image", v, end)
		}
	case "image": // Anthropic: {"source": {"type": "base64", "data": ...} | {"url": ...} | {"file_id": ...}}
		p.anthropic = true
		for _, k := range [...]string{"data", "url", "file_id"} {
			if v := p.field(f.source, k); v.ok() {
				return p.digestPart(dst, "image", v, end)
			}
		}
	case "input_audio": // OpenAI chat: {"data": base64, "format": "wav"}
		if v := p.field(f.inputAudio, "data"); v.ok() {
			return p.digestPart(dst, "audio", v, end)
		}
	case "tool_use": // Anthropic
		p.anthropic = true
		dst, err = p.toolCall(dst, f.name, f.input)
		return dst, end, err
	case "tool_result": // Anthropic
		p.anthropic = true
		if !p.nested {
			if f.content.ok() {
				dst, _, err = p.toolResult(dst, f.content.s)
			} else {
				dst = p.openPart(dst, "tool_result")
				dst = p.closePart(dst, p.pos(dst))
			}
			return dst, end, err
		}
	case "thinking": // Anthropic
		if f.thinking.ok() && b[f.thinking.s] == '"' {
			dst, _, err = p.thinking(dst, f.thinking.s)
			return dst, end, err
		}
		p.anthropic = true
	case "redacted_thinking", "document", "search_result", "server_tool_use", "web_search_tool_result", "container_upload":
		p.anthropic = true
	}
	// Any other part (or a known type in an unexpected shape): its type and
	// a digest of its members.
	dst, err = p.digestItem(dst, f.typ, obj)
	return dst, end, err
}

// field returns v if it is a string, or the span of v's string member key
// if v is an object; the zero span otherwise.
func (p *parser) field(v span, key string) span {
	b := p.b
	if !v.ok() {
		return span{}
	}
	switch b[v.s] {
	case '"':
		return v
	case '{':
		var kbuf nameBuf
		i, more, err := firstMember(b, v.s)
		for more && err == nil {
			k, vs, ve, err2 := member(b, i, &kbuf)
			if err2 != nil {
				return span{}
			}
			if string(k) == key && b[vs] == '"' {
				return span{vs, ve}
			}
			i, more, err = nextMember(b, ve)
		}
	}
	return span{}
}

// digestPart renders a part whose payload is the digest of the unescaped
// string v (an image URL, base64 data or a file id).
func (p *parser) digestPart(dst []byte, label string, v span, end int) ([]byte, int, error) {
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
	i, more, err := firstElement(b, i)
	for more && err == nil {
		if b[i] != '{' {
			return dst, 0, shapeErr(i, "tool call is not an object")
		}
		obj := i
		var fn, typ span
		var kbuf nameBuf
		i, more, err = firstMember(b, i)
		for more && err == nil {
			var k []byte
			var vs, ve int
			if k, vs, ve, err = member(b, i, &kbuf); err != nil {
				return dst, 0, err
			}
			switch string(k) {
			case "function":
				fn = span{vs, ve}
			case "type":
				typ = span{vs, ve}
			}
			i, more, err = nextMember(b, ve)
		}
		if err != nil {
			return dst, 0, err
		}
		if fn.ok() && b[fn.s] == '{' {
			if dst, err = p.functionCall(dst, fn.s); err != nil {
				return dst, 0, err
			}
		} else if dst, err = p.digestItem(dst, typ, obj); err != nil {
			return dst, 0, err
		}
		i, more, err = nextElement(b, i)
	}
	return dst, i, err
}

// functionCall renders the {"name", "arguments"} object at b[i] as a tool
// call.
func (p *parser) functionCall(dst []byte, i int) ([]byte, error) {
	b := p.b
	if b[i] != '{' {
		return dst, shapeErr(i, "function call is not an object")
	}
	var name, args span
	var kbuf nameBuf
	i, more, err := firstMember(b, i)
	for more && err == nil {
		k, vs, ve, err2 := member(b, i, &kbuf)
		if err2 != nil {
			return dst, err2
		}
		switch string(k) {
		case "name":
			name = span{vs, ve}
		case "arguments":
			args = span{vs, ve}
		}
		i, more, err = nextMember(b, ve)
	}
	if err != nil {
		return dst, err
	}
	return p.toolCall(dst, name, args)
}
