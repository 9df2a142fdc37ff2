package dialect

// parser holds the body and the little state rendering needs.
type parser struct {
	b []byte
	// anthropic is set when an Anthropic-only shape is seen, telling
	// Messages from Chat.
	anthropic bool
	// inText is set while the last item rendered in the current message is
	// text, so that the next text part is joined with "\n".
	inText bool
	// nested is set while rendering a tool result's content, where a
	// nested tool result is only digested (bounding recursion).
	nested bool
	// placement is the text length, from start, through the first user
	// message of the section being rendered; -1 until one is seen.
	placement int
	// start is where the section being rendered begins in dst.
	start int
	// kbuf unescapes the rare object key written with escapes.
	kbuf [32]byte
}

// The top-level members that render text. Each is rendered where it is met,
// so its value is scanned once, as a section of dst; the sections the
// dialect uses are then put in canonical order.
const (
	secTools = iota
	secSystem
	secMessages
	secInstructions
	secInput
	secPrompt
	secText
	secInputIDs
	numSections
)

// section is a rendered top-level member: dst[s:e].
type section struct {
	s, e      int
	ok        bool  // the member is present
	placement int   // relative to s; -1: no user message
	err       error // a shape error, reported only if the dialect uses the section
}

// top parses the top-level object, rendering each member that can enter
// the text as a section when it is met; of duplicate members the last
// wins, as in encoding/json. Then the dialect picks its sections, which are
// moved into canonical order if the body had them in another, so member
// order does not change the text.
func (p *parser) top(dst []byte) ([]byte, Request, error) {
	b := p.b
	var req Request
	i := skipWS(b, 0)
	if i >= len(b) {
		return dst, req, &parseError{err: ErrNotJSON, off: i, msg: "empty body"}
	}
	if b[i] != '{' {
		switch c := b[i]; {
		case c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n':
			j, err := skipValue(b, i)
			if err != nil {
				return dst, req, err
			}
			if j = skipWS(b, j); j < len(b) {
				return dst, req, syntaxErr(j, "data after top-level value")
			}
			return dst, req, shapeErr(i, "top-level value is not an object")
		}
		return dst, req, &parseError{err: ErrNotJSON, off: i, msg: "body does not begin with a JSON value"}
	}

	start := len(dst)
	var secs [numSections]section
	i, more, err := firstMember(b, i)
	if err != nil {
		return dst, req, err
	}
	for more {
		key, vs, err := readKey(b, i, &p.kbuf)
		if err != nil {
			return dst, req, err
		}
		sec := -1
		switch string(key) {
		case "messages":
			sec = secMessages
		case "system":
			sec = secSystem
			p.anthropic = true
		case "tools":
			sec = secTools
		case "input":
			sec = secInput
		case "instructions":
			sec = secInstructions
		case "prompt":
			sec = secPrompt
		case "text":
			if b[vs] == '"' || b[vs] == '[' { // not the Responses "text" options object
				sec = secText
			}
		case "input_ids":
			if b[vs] != 'n' {
				sec = secInputIDs
			}
		case "anthropic_version", "stop_sequences":
			p.anthropic = true
		}
		var ve int
		if sec >= 0 {
			dst, ve, err = p.section(dst, sec, vs, &secs[sec])
		} else {
			ve, err = skipValue(b, vs)
			switch string(key) {
			case "model":
				req.Model = stringContents(b, span{vs, ve})
			case "cache_salt":
				req.CacheSalt = stringContents(b, span{vs, ve})
			}
		}
		if err != nil {
			return dst, req, err
		}
		if i, more, err = nextMember(b, ve); err != nil {
			return dst, req, err
		}
	}
	if j := skipWS(b, i); j < len(b) {
		return dst, req, syntaxErr(j, "data after top-level object")
	}

	var order []int // the dialect's sections in canonical order
	switch {
	case secs[secMessages].ok:
		req.Kind = Chat
		if p.anthropic {
			req.Kind = Messages
		}
		order = []int{secTools, secSystem, secMessages}
	case secs[secInput].ok || secs[secInstructions].ok:
		req.Kind = Responses
		order = []int{secTools, secInstructions, secInput}
	case secs[secPrompt].ok:
		req.Kind = Completions
		order = []int{secPrompt}
	case secs[secText].ok || secs[secInputIDs].ok:
		req.Kind = Generate
		order = []int{secText, secInputIDs}
		if ids := &secs[secInputIDs]; ids.ok && !secs[secText].ok {
			ids.s++ // drop the RS that would separate the ids from text
		}
	default:
		return dst, Request{}, shapeErr(i, "no messages, input, prompt, text or input_ids")
	}
	var used [3]section
	n := 0
	for _, k := range order {
		if s := secs[k]; s.ok {
			if s.err != nil {
				return dst, Request{}, s.err
			}
			used[n] = s
			n++
		}
	}
	dst, req.Placement = assemble(dst, start, used[:n])
	return dst, req, nil
}

// section renders the top-level member whose value is at b[vs] into dst
// and records it in sec. It returns the offset after the value. A shape
// error is recorded in sec, to be reported only if the dialect uses the
// section; a syntax error is returned.
func (p *parser) section(dst []byte, which, vs int, sec *section) ([]byte, int, error) {
	s := len(dst)
	p.start = s
	p.placement = -1
	var ve int
	var err error
	switch which {
	case secTools:
		dst, ve, err = p.tools(dst, vs)
	case secSystem:
		if p.b[vs] != 'n' {
			dst = p.openMessage(dst, "system")
		}
		dst, ve, err = p.content(dst, vs)
	case secMessages:
		dst, ve, err = p.messages(dst, vs)
	case secInstructions:
		dst, ve, err = p.instructions(dst, vs)
	case secInput:
		dst, ve, err = p.input(dst, vs)
	case secPrompt, secText:
		dst, ve, err = p.prompts(dst, vs)
	case secInputIDs:
		// Rendered with a leading RS, dropped if there is no text.
		if p.b[vs] != '[' {
			err = shapeErr(vs, "input_ids is not an array")
			break
		}
		dst = append(dst, sepRole)
		dst, ve, err = p.prompts(dst, vs)
	}
	if err != nil {
		if pe, ok := err.(*parseError); !ok || pe.err != ErrUnknownDialect {
			return dst, 0, err
		}
		*sec = section{ok: true, err: err}
		ve, err = skipValue(p.b, vs)
		return dst[:s], ve, err
	}
	*sec = section{s: s, e: len(dst), ok: true, placement: p.placement}
	return dst, ve, nil
}

// assemble makes secs (in canonical order, disjoint ranges of dst[start:])
// the whole of dst[start:], in that order, and returns the placement key's
// length (-1: the whole text). The sections are usually in order already;
// if not, all but the last (the large messages, input or prompt section)
// are copied past the end, the last is moved into place, and the copies
// are moved in front of it.
func assemble(dst []byte, start int, secs []section) ([]byte, int) {
	placement := -1
	off := 0
	inPlace := true
	for _, s := range secs {
		if s.s != start+off {
			inPlace = false
		}
		if placement < 0 && s.placement >= 0 {
			placement = off + s.placement
		}
		off += s.e - s.s
	}
	if inPlace || len(secs) == 0 {
		return dst[:start+off], placement
	}
	tmp := len(dst)
	last := secs[len(secs)-1]
	for _, s := range secs[:len(secs)-1] {
		dst = append(dst, dst[s.s:s.e]...)
	}
	small := len(dst) - tmp
	if last.s != start+small {
		copy(dst[start+small:], dst[last.s:last.e])
	}
	copy(dst[start:], dst[tmp:tmp+small])
	return dst[:start+off], placement
}

// stringContents returns the raw contents of the string value v, or nil if
// v is absent or not a string.
func stringContents(b []byte, v span) []byte {
	if !v.ok() || b[v.s] != '"' {
		return nil
	}
	return b[v.s+1 : v.e-1 : v.e-1]
}

// isNull reports whether v is the literal null.
func isNull(b []byte, v span) bool { return v.ok() && b[v.s] == 'n' }
