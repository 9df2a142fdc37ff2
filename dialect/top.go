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
	kbuf nameBuf
	// units is what the object being walked may still spend (see walk.go):
	// the top-level members left, or, in a section, its group's budget,
	// kept in budget between sections.
	units  int
	budget [numGroups]int

	// limit is how many bytes of text to render (maxInt: all of it). Each
	// section is rendered into dst up to lim = start + limit (see put);
	// past it, its bytes are only counted, in over. A position in the
	// section's text is len(dst) + over (pos).
	limit, lim, over int
	// exact counts the open parts whose length is (partly) written: past
	// lim, strings in them are measured exactly (countString).
	exact int
}

// A limited rendering (AppendLimit) runs the same code as a whole one:
// every member is parsed alike, but once the section being rendered has
// reached lim, what would be appended is only counted. Past lim, strings
// are skipped (skipString) and count their raw length, an upper bound of
// their text's; digests are not computed; raw bytes are not copied. So
// positions past lim may be too large, but never those below it: a part
// whose length is written before lim (exact > 0) measures its strings
// exactly, escapes checked (countString). Invariant: over > 0 only if
// len(dst) >= lim, so positions below len(dst) are written and positions
// past it are counted.

// pos returns the current position in the text: its length so far.
func (p *parser) pos(dst []byte) int { return len(dst) + p.over }

// put appends s to dst, as much of it as fits below lim, and counts the
// rest.
func put[S ~string | ~[]byte](p *parser, dst []byte, s S) []byte {
	if room := p.lim - len(dst); room < len(s) {
		room = max(room, 0)
		p.over += len(s) - room
		s = s[:room]
	}
	return append(dst, s...)
}

// putByte appends c to dst below lim, or counts it.
func (p *parser) putByte(dst []byte, c byte) []byte {
	if len(dst) < p.lim {
		return append(dst, c)
	}
	p.over++
	return dst
}

// reset truncates the section's text to position n, a position pos
// returned earlier in this section (so, by the invariant, if n >
// len(dst) nothing was written since).
func (p *parser) reset(dst []byte, n int) []byte {
	if n <= len(dst) {
		p.over = 0
		return dst[:n]
	}
	p.over = n - len(dst)
	return dst
}

// str renders the string at b[i]: unescaped below lim, counted past it
// (exactly in a part whose length is written, else by its raw length).
// It returns the offset after the string.
func (p *parser) str(dst []byte, i int) ([]byte, int, error) {
	r := i + 1
	if len(dst) < p.lim {
		var more bool
		var err error
		if dst, r, more, err = appendStringMax(dst, p.b, i, p.lim); !more || err != nil {
			return dst, r, err
		}
	}
	if p.exact > 0 {
		end, n, err := countString(p.b, i, r)
		p.over += n
		return dst, end, err
	}
	end, err := skipString(p.b, i)
	if err == nil {
		p.over += end - 1 - r
	}
	return dst, end, err
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

// Sections share budgets in two groups: the tools, system and
// instructions, which precede the turns in the text, and the turns
// (messages, input, prompt, text, input_ids), so that growing the turns
// never changes what the sections before them can spend.
const (
	groupFirst = iota
	groupTurns
	numGroups
)

func groupOf(sec int) int {
	switch sec {
	case secTools, secSystem, secInstructions:
		return groupFirst
	}
	return groupTurns
}

// section is a rendered top-level member: dst[s:e], then over bytes that
// a limited rendering only counted.
type section struct {
	s, e, over int
	ok         bool  // the member is present
	placement  int   // relative to s; -1: no user message
	err        error // a shape error, reported only if the dialect uses the section
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
	p.units, p.budget = topMembers, [numGroups]int{sectionBudget, sectionBudget}
	m, err := p.members(i)
	for ; err == nil && m.more; err = m.next(p, err) {
		vs := m.vs
		sec := -1
		switch m.k {
		case fMessages:
			sec = secMessages
		case fSystem:
			sec = secSystem
			p.anthropic = true
		case fTools:
			sec = secTools
		case fInput:
			sec = secInput
		case fInstructions:
			sec = secInstructions
		case fPrompt:
			sec = secPrompt
		case fText:
			if b[vs] == '"' || b[vs] == '[' { // not the Responses "text" options object
				sec = secText
			}
		case fInputIDs:
			if b[vs] != 'n' {
				sec = secInputIDs
			}
		case fAnthropicVersion, fStopSequences:
			p.anthropic = true
		case fModel:
			m.ve, err = skipValue(b, vs)
			req.Model = stringContents(b, span{vs, m.ve})
			continue
		case fCacheSalt:
			m.ve, err = skipValue(b, vs)
			req.CacheSalt = stringContents(b, span{vs, m.ve})
			continue
		}
		if sec >= 0 {
			dst, m.ve, err = p.section(dst, sec, vs, &secs[sec])
		} else {
			m.ve, err = skipValue(b, vs)
		}
	}
	if err == errCut {
		return dst, req, shapeErr(m.i, "more than 4096 top-level members")
	}
	if err != nil {
		return dst, req, err
	}
	i = m.i
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
	dst, req.TextLen, req.Placement = assemble(dst, start, p.limit, used[:n])
	return dst, req, nil
}

// section renders the top-level member whose value is at b[vs] into dst
// and records it in sec. It returns the offset after the value. A shape
// error is recorded in sec, to be reported only if the dialect uses the
// section; a syntax error is returned. Once the section's budget is spent,
// its text ends where it was, and the rest of the value is only skipped.
func (p *parser) section(dst []byte, which, vs int, sec *section) ([]byte, int, error) {
	g, top := groupOf(which), p.units
	p.units = p.budget[g]
	dst, ve, err := p.render(dst, which, vs, sec)
	p.budget[g], p.units = p.units, top
	return dst, ve, err
}

// render is section once the budget is set.
func (p *parser) render(dst []byte, which, vs int, sec *section) ([]byte, int, error) {
	s := len(dst)
	p.start = s
	p.placement = -1
	p.over, p.exact = 0, 0
	p.lim = maxInt
	if extra := b2i(which == secInputIDs); p.limit < maxInt-s-extra {
		// input_ids renders one more byte: its leading RS may be dropped.
		p.lim = s + p.limit + extra
	}
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
		dst = p.putByte(dst, sepRole)
		dst, ve, err = p.prompts(dst, vs)
	}
	if err == errCut {
		ve, err = skipValue(p.b, vs)
	}
	if err != nil {
		if pe, ok := err.(*parseError); !ok || pe.err != ErrUnknownDialect {
			return dst, 0, err
		}
		*sec = section{ok: true, err: err}
		ve, err = skipValue(p.b, vs)
		return p.reset(dst, s), ve, err
	}
	*sec = section{s: s, e: len(dst), over: p.over, ok: true, placement: p.placement}
	return dst, ve, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// assemble makes secs (in canonical order, disjoint ranges of dst[start:])
// the whole of dst[start:], in that order, cut to limit bytes, and returns
// the length of the whole text and the placement key's length (-1: the
// whole text). A section that a limited rendering cut (over > 0) has at
// least limit bytes written, so the cut text is a prefix of the whole.
// The sections are usually in order already; if not, all but the last
// (the large messages, input or prompt section) are copied past the end,
// the last is moved into place, and the copies are moved in front of it.
func assemble(dst []byte, start, limit int, secs []section) (out []byte, textLen, placement int) {
	placement = -1
	off := 0 // of the bytes written
	inPlace := true
	for _, s := range secs {
		if s.s != start+off {
			inPlace = false
		}
		if placement < 0 && s.placement >= 0 {
			placement = textLen + s.placement
		}
		off += s.e - s.s
		textLen += s.e - s.s + s.over
	}
	n := min(off, limit)
	if inPlace || len(secs) == 0 {
		return dst[:start+n], textLen, placement
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
	return dst[:start+n], textLen, placement
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
