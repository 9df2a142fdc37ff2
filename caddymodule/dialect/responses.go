package dialect

// This file renders the OpenAI Responses API: "instructions" (as a system
// message) and "input", a string (one user message) or an array of items.

// instructions renders the instructions value at b[i]: a string as a
// system message, or an array of input items.
func (p *parser) instructions(dst []byte, i int) ([]byte, int, error) {
	switch p.b[i] {
	case '"':
		return p.text(p.openMessage(dst, "system"), i)
	case '[':
		return p.items(dst, i)
	case 'n':
		end, err := skipLiteral(p.b, i, "null")
		return dst, end, err
	}
	return dst, 0, shapeErr(i, "instructions is not a string, an array or null")
}

// input renders the input value at b[i]: a string as a user message, or an
// array of input items.
func (p *parser) input(dst []byte, i int) ([]byte, int, error) {
	switch p.b[i] {
	case '"':
		dst, end, err := p.text(p.openMessage(dst, "user"), i)
		if p.placement < 0 {
			p.placement = p.pos(dst) - p.start
		}
		return dst, end, err
	case '[':
		return p.items(dst, i)
	case 'n':
		end, err := skipLiteral(p.b, i, "null")
		return dst, end, err
	}
	return dst, 0, shapeErr(i, "input is not a string, an array or null")
}

// items renders the array of input items at b[i].
func (p *parser) items(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	i, more, err := firstElement(b, i)
	for more && err == nil {
		if dst, i, err = p.item(dst, i); err == nil {
			i, more, err = nextElement(b, i)
		}
	}
	return dst, i, err
}

// item renders the input item at b[i]:
//
//   - a message ({"type": "message"} or no type, with "role" and
//     "content"): RS role US content, like a chat message;
//   - "function_call": RS "assistant" US and a tool call of "name" and
//     "arguments";
//   - "function_call_output": RS "tool" US and "output" as content;
//   - any other item (reasoning, item_reference, built-in tool calls, ...):
//     GS type US and a digest of its members.
//
// A message's content or a function call's output is rendered when met if
// the members that decide the item's shape came before it.
func (p *parser) item(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	if b[i] != '{' {
		return dst, 0, shapeErr(i, "input item is not an object")
	}
	obj, is := i, p.pos(dst)
	var typ, role, content, name, args, output span
	var tbuf nameBuf
	var t []byte // the last type, unescaped (nil if not a string)
	var done, doneMsg, user, slow bool
	i, more, err := firstMember(b, i)
	for more && err == nil {
		var key []byte
		var vs, ve int
		if key, vs, err = readKey(b, i, &p.kbuf); err != nil {
			return dst, 0, err
		}
		var v *span
		switch string(key) {
		case "type":
			v = &typ
		case "role":
			v = &role
		case "content":
			v = &content
		case "name":
			v = &name
		case "arguments":
			v = &args
		case "output":
			v = &output
		}
		if v != nil && v.ok() {
			slow = true // a duplicate: the last one counts
		}
		switch {
		case v == &content && !done && !slow && role.ok() && b[role.s] == '"' && (!typ.ok() || string(t) == "message"):
			if dst, user, err = p.header(dst, role.s); err == nil {
				dst, ve, err = p.content(dst, vs)
			}
			done, doneMsg = true, true
		case v == &output && !done && !slow && string(t) == "function_call_output":
			dst, ve, err = p.content(p.openMessage(dst, "tool"), vs)
			done = true
		case v == &typ && b[vs] == '"':
			t, ve, err = readName(b, vs, &tbuf)
		default:
			if v == &typ {
				t = nil
			}
			ve, err = skipValue(b, vs)
		}
		if v != nil {
			*v = span{vs, ve}
		}
		if v == &typ && doneMsg && string(t) != "message" {
			slow = true // rendered as a message, but it is not one
		}
		if err == nil {
			i, more, err = nextMember(b, ve)
		}
	}
	if err != nil {
		return dst, 0, err
	}
	end := i
	if !done || slow {
		dst, done, user = p.reset(dst, is), false, false
	}
	switch {
	case done:
	case (!typ.ok() || string(t) == "message") && role.ok() && b[role.s] == '"':
		if dst, user, err = p.header(dst, role.s); err != nil {
			return dst, 0, err
		}
		if content.ok() {
			dst, _, err = p.content(dst, content.s)
		}
	case string(t) == "function_call":
		dst, err = p.toolCall(p.openMessage(dst, "assistant"), name, args)
	case string(t) == "function_call_output":
		dst = p.openMessage(dst, "tool")
		if output.ok() {
			dst, _, err = p.content(dst, output.s)
		}
	default:
		dst, err = p.digestItem(dst, typ, obj)
	}
	if err != nil {
		return dst, 0, err
	}
	if user && p.placement < 0 {
		p.placement = p.pos(dst) - p.start
	}
	return dst, end, nil
}
