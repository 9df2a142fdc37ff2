package peers

import (
	"bytes"
	"encoding/binary"

	"github.com/prefixcache/caddy-prefixcache/dialect"
)

// Control bytes of the routing text (see dialect).
const (
	ctlFS = 0x1c // the tools section follows
	ctlGS = 0x1d // a non-text part follows
	ctlRS = 0x1e // a message follows, or the next prompt of a batch
	ctlUS = 0x1f // ends a label
)

// message is the text of one message of a chat-like routing text.
type message struct {
	role []byte
	text []byte // its text items, "\n"-separated; non-text parts left out
}

// messages splits a chat-like routing text into its messages (Anthropic's
// top-level system first, as the text renders it), leaving out the tools
// section and every non-text part (images, tool calls, tool results of
// Anthropic's form), as routers that join message texts see a request.
// For prompt-like dialects it returns the first prompt as one message with
// no role. The slices alias text.
func messages(text []byte, kind dialect.Kind) []message {
	if kind == dialect.Completions || kind == dialect.Generate {
		if i := bytes.IndexByte(text, ctlRS); i >= 0 {
			text = text[:i]
		}
		return []message{{text: text}}
	}
	if len(text) > 0 && text[0] == ctlFS {
		i := bytes.IndexByte(text, ctlRS)
		if i < 0 {
			return nil
		}
		text = text[i:]
	}
	var msgs []message
	for len(text) > 0 && text[0] == ctlRS {
		text = text[1:]
		us := bytes.IndexByte(text, ctlUS)
		if us < 0 {
			break
		}
		m := message{role: text[:us]}
		text = text[us+1:]
		// Content: text bytes up to the next message, with parts skipped
		// by their length (a part's payload may hold any byte).
		var buf []byte
		start := 0
		i := 0
	content:
		for i < len(text) {
			switch text[i] {
			case ctlRS:
				break content
			case ctlGS:
				buf = append(buf, text[start:i]...)
				lu := bytes.IndexByte(text[i:], ctlUS)
				if lu < 0 || i+lu+5 > len(text) {
					i = len(text)
					start = i
					break content
				}
				n := int(binary.LittleEndian.Uint32(text[i+lu+1:]))
				i = min(len(text), i+lu+5+n)
				start = i
			default:
				i++
			}
		}
		if buf == nil {
			m.text = text[start:i]
		} else {
			m.text = append(buf, text[start:i]...)
		}
		msgs = append(msgs, m)
		text = text[i:]
	}
	return msgs
}

// joinMessages joins the texts of msgs with sep, skipping empty ones when
// skipEmpty is set.
func joinMessages(msgs []message, sep string, skipEmpty bool) []byte {
	var out []byte
	first := true
	for _, m := range msgs {
		if skipEmpty && len(m.text) == 0 {
			continue
		}
		if !first {
			out = append(out, sep...)
		}
		out = append(out, m.text...)
		first = false
	}
	return out
}
