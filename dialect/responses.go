package dialect

// This file renders the OpenAI Responses API: "instructions" (as a system
// message) and "input", a string (one user message) or an array of items.

// instructions renders the instructions value at b[i]: a string as a
// system message, or an array of input items.
func (p *parser) instructions(dst []byte, i int) ([]byte, int, error) {
	return p.itemsOr(dst, i, "system", "instructions is not a string, an array or null")
}

// input renders the input value at b[i]: a string as a user message, or an
// array of input items.
func (p *parser) input(dst []byte, i int) ([]byte, int, error) {
	return p.itemsOr(dst, i, "user", "input is not a string, an array or null")
}

// itemsOr renders the value at b[i]: a string as one message of role, an
// array of input items, or null; anything else is the shape error msg.
func (p *parser) itemsOr(dst []byte, i int, role, msg string) ([]byte, int, error) {
	switch p.b[i] {
	case '"':
		dst, end, err := p.text(p.openMessage(dst, role), i)
		if role == "user" && p.placement < 0 {
			p.placement = p.pos(dst) - p.start
		}
		return dst, end, err
	case '[':
		e, err := p.elements(i)
		for ; err == nil && e.more; err = e.next(p, err) {
			dst, e.ve, err = p.item(dst, e.i)
		}
		return dst, e.i, err
	case 'n':
		end, err := skipLiteral(p.b, i, "null")
		return dst, end, err
	}
	return dst, 0, shapeErr(i, msg)
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
	var f fields
	t := tNone
	var done, doneMsg, user bool
	m, err := p.members(i)
	for ; err == nil && m.more; err = m.next(p, err) {
		k := f.of(m.k)
		eager := !done && !f.redo
		switch role := f.at[fRole]; {
		case k == fType:
			t, m.ve, err = p.typeAt(m.vs)
			if doneMsg && t != tMessage {
				f.redo = true // rendered as a message, but it is not one
			}
		case k == fContent && eager && (t == tNone || t == tMessage) && role.ok() && b[role.s] == '"':
			if dst, user, _, err = p.header(dst, role.s); err == nil {
				dst, m.ve, err = p.content(dst, m.vs)
			}
			done, doneMsg = true, true
		case k == fOutput && eager && t == tFunctionCallOutput:
			dst, m.ve, err = p.content(p.openMessage(dst, "tool"), m.vs)
			done = true
		default:
			m.ve, err = p.skip(m.vs)
		}
		f.at[k] = span{m.vs, m.ve}
	}
	if err != nil {
		return dst, 0, err
	}
	if f.redo {
		if err = p.redo(m.i - obj); err != nil {
			return dst, 0, err
		}
	}
	if !done || f.redo {
		dst, done, user = p.reset(dst, is), false, false
	}
	switch role := f.at[fRole]; {
	case done:
	case (t == tNone || t == tMessage) && role.ok() && b[role.s] == '"':
		if dst, user, _, err = p.header(dst, role.s); err != nil {
			return dst, 0, err
		}
		if v := f.at[fContent]; v.ok() {
			dst, _, err = p.content(dst, v.s)
		}
	case t == tFunctionCall:
		dst, err = p.toolCall(p.openMessage(dst, "assistant"), f.at[fName], f.at[fArguments])
	case t == tFunctionCallOutput:
		dst = p.openMessage(dst, "tool")
		if v := f.at[fOutput]; v.ok() {
			dst, _, err = p.content(dst, v.s)
		}
	default:
		dst, err = p.digestItem(dst, f.at[fType], obj)
	}
	if err != nil {
		return dst, 0, err
	}
	if user && p.placement < 0 {
		p.placement = p.pos(dst) - p.start
	}
	return dst, m.i, nil
}
