package dialect

import "errors"

// This file is how the renderers walk the objects and arrays they read:
// one loop shape for every object (members) and every array (elements),
// which spends the section's budget, and one record of the members a
// message, part, item or tool call renders (fields).

// The budget bounds what a crafted body can cost (see "Budget" in the
// package doc): each group of sections may read sectionBudget members and
// elements in all; a value skipped costs one more per skipBytes bytes
// examined one at a time (skipWork), and an object rendered again from
// its spans (it has a duplicate member) one more per redoBytes of it. The
// top-level object may have topMembers members.
const (
	sectionBudget = 1 << 16
	redoBytes     = 16
	skipBytes     = 16
	topMembers    = 1 << 12
)

// errCut is what the walks return once the budget is spent. section
// handles it (the section's text ends there), and top (too many
// top-level members); it never leaves the package.
var errCut = errors.New("dialect: budget spent")

// spend takes one unit of the budget, or returns errCut.
func (p *parser) spend() error {
	if p.units == 0 {
		return errCut
	}
	p.units--
	return nil
}

// skip is skipValue for the renderers: it spends the budget for the work
// of skipping (see skipWork), or returns errCut.
func (p *parser) skip(i int) (int, error) {
	end, work, err := skipWork(p.b, i)
	if err != nil {
		return 0, err
	}
	c := work / skipBytes
	if c > p.units {
		p.units = 0
		return 0, errCut
	}
	p.units -= c
	return end, nil
}

// redo spends the budget for rendering again, from its spans, an object
// of n bytes, or returns errCut.
func (p *parser) redo(n int) error {
	if c := 1 + n/redoBytes; c <= p.units {
		p.units -= c
		return nil
	}
	p.units = 0
	return errCut
}

// members is the state of a loop over an object's members.
type members struct {
	k      field // what the member's key names, compared unescaped
	vs, ve int   // the member's value, b[vs:ve]: the loop body sets ve
	i      int   // the member's key, or, once the loop ends, the offset after the object
	more   bool  // a member is at i
}

// members starts a loop over the members of the object at b[i] and reads
// the first key. The loop body renders or skips the value at m.vs and sets
// m.ve to the offset after it; next reads the next key:
//
//	m, err := p.members(i)
//	for ; err == nil && m.more; err = m.next(p, err) {
//		m.ve, err = p.skip(m.vs)
//	}
//	// err is the first error; else m.i is the offset after the object
func (p *parser) members(i int) (m members, err error) {
	if m.i, m.more, err = firstMember(p.b, i); err != nil || !m.more {
		return m, err
	}
	if p.units == 0 {
		return m, errCut
	}
	p.units--
	key, vs, err := readKey(p.b, m.i, &p.kbuf)
	m.k, m.vs = fieldOf(key), vs
	return m, err
}

// next moves past the separator after the value, at m.ve, and reads the
// next key, unless err (the loop body's) is set: then it returns err.
func (m *members) next(p *parser, err error) error {
	if err != nil {
		return err
	}
	if m.i, m.more, err = nextMember(p.b, m.ve); err != nil || !m.more {
		return err
	}
	// As in members: a unit, then the key (repeated to save a call).
	if p.units == 0 {
		return errCut
	}
	p.units--
	key, vs, err := readKey(p.b, m.i, &p.kbuf)
	m.k, m.vs = fieldOf(key), vs
	return err
}

// elements is the state of a loop over an array's elements.
type elements struct {
	i    int  // the element, or, once the loop ends, the offset after the array
	ve   int  // the offset after the element: the loop body sets it
	more bool // an element is at i
}

// elements starts a loop over the elements of the array at b[i], as
// members does for objects: the loop body renders or skips the element at
// e.i and sets e.ve to the offset after it.
//
//	e, err := p.elements(i)
//	for ; err == nil && e.more; err = e.next(p, err) {
//		e.ve, err = p.skip(e.i)
//	}
func (p *parser) elements(i int) (e elements, err error) {
	if e.i, e.more, err = firstElement(p.b, i); err == nil && e.more {
		err = p.spend()
	}
	return e, err
}

// next moves to the next element, as members.next does.
func (e *elements) next(p *parser, err error) error {
	if err != nil {
		return err
	}
	if e.i, e.more, err = nextElement(p.b, e.ve); err == nil && e.more {
		if p.units == 0 {
			return errCut
		}
		p.units--
	}
	return err
}

// field is what an object key names: one of the members this package
// reads, or fOther. The members that messages, parts, items and tool
// calls render come first (fields records their spans), then the
// top-level members and the members of nested objects.
type field uint8

const (
	fOther field = iota // a member this package does not read
	fRole
	fContent
	fToolCalls
	fFunctionCall
	fType
	fText
	fThinking
	fImageURL
	fInputAudio
	fSource
	fName
	fInput
	fFileID
	fArguments
	fOutput
	fFunction
	numFields // fields has a span for each field before it

	fMessages
	fSystem
	fTools
	fInstructions
	fPrompt
	fInputIDs
	fAnthropicVersion
	fStopSequences
	fModel
	fCacheSalt
	fURL
	fData
	fInputSchema
)

func fieldOf(key []byte) field {
	switch string(key) {
	case "role":
		return fRole
	case "content":
		return fContent
	case "tool_calls":
		return fToolCalls
	case "function_call":
		return fFunctionCall
	case "type":
		return fType
	case "text":
		return fText
	case "thinking":
		return fThinking
	case "image_url":
		return fImageURL
	case "input_audio":
		return fInputAudio
	case "source":
		return fSource
	case "name":
		return fName
	case "input":
		return fInput
	case "file_id":
		return fFileID
	case "arguments":
		return fArguments
	case "output":
		return fOutput
	case "function":
		return fFunction
	case "messages":
		return fMessages
	case "system":
		return fSystem
	case "tools":
		return fTools
	case "instructions":
		return fInstructions
	case "prompt":
		return fPrompt
	case "input_ids":
		return fInputIDs
	case "anthropic_version":
		return fAnthropicVersion
	case "stop_sequences":
		return fStopSequences
	case "model":
		return fModel
	case "cache_salt":
		return fCacheSalt
	case "url":
		return fURL
	case "data":
		return fData
	case "input_schema":
		return fInputSchema
	}
	return fOther
}

// fields records the spans of an object's members by field; of
// duplicates the last counts, as in encoding/json. redo is set by a
// duplicate: what was rendered as the members were met is then redone
// from the spans.
type fields struct {
	at   [numFields]span
	redo bool
}

// of returns k if fields records it, else fOther, noting a duplicate.
// The loop body records the member's span in at once it has the value's
// end.
func (f *fields) of(k field) field {
	if k >= numFields {
		return fOther
	}
	if k != fOther && f.at[k].ok() {
		f.redo = true
	}
	return k
}

// spans records in f the known members of the object at b[i] and returns
// the offset after it.
func (p *parser) spans(i int, f *fields) (int, error) {
	m, err := p.members(i)
	for ; err == nil && m.more; err = m.next(p, err) {
		k := f.of(m.k)
		m.ve, err = p.skip(m.vs)
		f.at[k] = span{m.vs, m.ve}
	}
	return m.i, err
}

// partType is what a part's or item's "type" names.
type partType uint8

const (
	tNone               partType = iota // no type member
	tOther                              // a type this package does not know, or not a string
	tText                               // text, input_text, output_text
	tImageURL                           // OpenAI chat image_url
	tInputImage                         // OpenAI Responses input_image
	tImage                              // Anthropic image
	tInputAudio                         // OpenAI chat input_audio
	tToolUse                            // Anthropic tool_use
	tToolResult                         // Anthropic tool_result
	tThinking                           // Anthropic thinking
	tAnthropic                          // other Anthropic-only blocks (digested)
	tMessage                            // Responses message
	tFunctionCall                       // Responses function_call
	tFunctionCallOutput                 // Responses function_call_output
)

func typeOf(name []byte) partType {
	switch string(name) {
	case "text", "input_text", "output_text":
		return tText
	case "image_url":
		return tImageURL
	case "input_image":
		return tInputImage
	case "image":
		return tImage
	case "input_audio":
		return tInputAudio
	case "tool_use":
		return tToolUse
	case "tool_result":
		return tToolResult
	case "thinking":
		return tThinking
	case "redacted_thinking", "document", "search_result", "server_tool_use", "web_search_tool_result", "container_upload":
		return tAnthropic
	case "message":
		return tMessage
	case "function_call":
		return tFunctionCall
	case "function_call_output":
		return tFunctionCallOutput
	}
	return tOther
}

// typeAt reads the type value at b[i]: what it names, compared unescaped,
// and the offset after it.
func (p *parser) typeAt(i int) (partType, int, error) {
	if p.b[i] != '"' {
		end, err := p.skip(i)
		return tOther, end, err
	}
	name, end, err := readName(p.b, i, &p.kbuf)
	return typeOf(name), end, err
}
