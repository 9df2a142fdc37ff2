package dialect

import "encoding/binary"

// This file renders the prompt-based dialects: OpenAI completions
// ("prompt") and SGLang /generate ("text", "input_ids").

// prompts renders the prompt value at b[i]: a string (its text), an array
// of token ids (SUB and 4 bytes per id), or a batch: an array of strings
// and token-id arrays, separated by RS.
func (p *parser) prompts(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	switch b[i] {
	case '"':
		return p.str(dst, i)
	case '[':
	default:
		return dst, 0, shapeErr(i, "prompt is not a string or an array")
	}
	e, err := p.elements(i)
	if err != nil || !e.more {
		return dst, e.i, err
	}
	if c := b[e.i]; c == '-' || (c >= '0' && c <= '9') {
		return p.tokens(dst, i)
	}
	for n := 0; err == nil && e.more; n, err = n+1, e.next(p, err) {
		if n > 0 {
			dst = p.putByte(dst, sepRole)
		}
		switch b[e.i] {
		case '"':
			dst, e.ve, err = p.str(dst, e.i)
		case '[':
			dst, e.ve, err = p.tokens(dst, e.i)
		default:
			if _, err = skipValue(b, e.i); err == nil {
				err = shapeErr(e.i, "prompt element is not a string or an array of token ids")
			}
		}
	}
	return dst, e.i, err
}

// tokens renders the array of token ids at b[i] as SUB followed by each id
// as 4 bytes little-endian, and returns the offset after the array. Ids are
// the bulk of such bodies, so plain digits followed by "," or "]" take a
// fast path; anything else goes through scanNumber, which also validates.
//
// Measured (thread CPU time, 16 KB of 6-digit ids): 6.9 ns/id. A SWAR
// parser of eight digits at a time was 7.1 ns/id (the id-to-id dependency
// dominates, not the digits) and not worth its complexity.
func (p *parser) tokens(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	dst = p.putByte(dst, sepTokens)
	i, more, err := firstElement(b, i)
	for more && err == nil {
		j := i
		var v uint64
		for j < len(b) {
			c := b[j] - '0'
			if c > 9 {
				break
			}
			v = v*10 + uint64(c)
			j++
		}
		if j == i || j-i > 10 || v > 1<<32-1 || (b[i] == '0' && j > i+1) || (j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E')) {
			end, id, ok, err := p.tokenSlow(i)
			if err != nil {
				return dst, 0, err
			}
			if !ok {
				return dst, 0, shapeErr(i, "token id is not an integer in [0, 2^32)")
			}
			j, v = end, uint64(id)
		}
		switch {
		case len(dst) < p.lim-3:
			dst = binary.LittleEndian.AppendUint32(dst, uint32(v))
		case len(dst) >= p.lim:
			p.over += 4 // past the limit: only counted
		default:
			dst = p.putID(dst, uint32(v))
		}
		if j+1 < len(b) && b[j] == ',' && b[j+1]-'0' <= 9 {
			i = j + 1 // compact ",<digit>": the next element
			continue
		}
		i, more, err = nextElement(b, j)
	}
	return dst, i, err
}

// tokenSlow scans the element at b[i] that is not a plain short integer:
// a syntax error, a shape error for non-numbers, or scanNumber's result.
func (p *parser) tokenSlow(i int) (end int, id uint32, ok bool, err error) {
	b := p.b
	if c := b[i]; c != '-' && (c < '0' || c > '9') {
		if _, err = skipValue(b, i); err != nil {
			return 0, 0, false, err
		}
		return 0, 0, false, shapeErr(i, "token id is not a number")
	}
	return scanNumber(b, i)
}

// putID appends id, 4 bytes little-endian, as put does.
func (p *parser) putID(dst []byte, id uint32) []byte {
	var a [4]byte
	binary.LittleEndian.PutUint32(a[:], id)
	return put(p, dst, a[:])
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }
