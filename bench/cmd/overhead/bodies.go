package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// Bodies: convs OpenAI chat requests of about size bytes, distinct from
// their first chunk (each system prompt starts with its conversation
// number), written as files, and a wrk script that sends them in turn.

func bodyPath(dir string, size, i int) string {
	return filepath.Join(dir, fmt.Sprintf("body-%s-%03d.json", sizeName(size), i))
}

func writeBodies(dir string, size, convs int) (script string, bodyLen int, err error) {
	for i := range convs {
		b := chatBody(size, uint64(i))
		bodyLen = len(b)
		if err := os.WriteFile(bodyPath(dir, size, i), b, 0o644); err != nil {
			return "", 0, err
		}
	}
	script = filepath.Join(dir, fmt.Sprintf("chat-%s.lua", sizeName(size)))
	lua := fmt.Sprintf(`-- sends the %d bodies in turn, preformatted once per thread
local reqs = {}
local n = %d
init = function(args)
  for i = 1, n do
    local f = assert(io.open(string.format(%q, i - 1), "rb"))
    local body = f:read("*a")
    f:close()
    reqs[i] = wrk.format("POST", "/v1/chat/completions", {["Content-Type"] = "application/json"}, body)
  end
end
local k = 0
request = function()
  k = k %% n + 1
  return reqs[k]
end
`, convs, convs, filepath.Join(dir, fmt.Sprintf("body-%s-%%03d.json", sizeName(size))))
	return script, bodyLen, os.WriteFile(script, []byte(lua), 0o644)
}

var words = strings.Fields(`the of and to in is that for it as with was on be by at this are
from or an which have not but had they you were there been one all we their has would when if so
no what can out other into more some could them than then its only also time two may about over
new like after these should any most such how where just those through very before well because
each much good model cache request server token prompt prefix replica engine latency throughput
café naïve résumé façade déjà Zürich São Kraków — → ✓ 数据 東京`)

// chatBody is the generator of caddymodule's benchmarks: a system prompt,
// then alternating user and assistant turns of 20 to 140 words of prose
// with quotes, line breaks and non-ASCII, compact JSON with raw UTF-8, of
// at least size bytes.
func chatBody(size int, conv uint64) []byte {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type request struct {
		Model       string    `json:"model"`
		Messages    []message `json:"messages"`
		Stream      bool      `json:"stream"`
		Temperature float64   `json:"temperature"`
		MaxTokens   int       `json:"max_tokens"`
	}
	r := rand.New(rand.NewPCG(conv, uint64(size)))
	req := request{
		Model: "meta-llama/Llama-3.1-8B-Instruct",
		Messages: []message{{"system", fmt.Sprintf("%016x You are a helpful, precise assistant for a software company.\n"+
			"Answer in the user's language. Cite sources as [n]. Prefer short paragraphs.\n", conv)}},
		Temperature: 0.7,
		MaxTokens:   512,
	}
	n := 200
	for i := 0; n < size; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		m := message{role, prose(r, 20+r.IntN(120))}
		req.Messages = append(req.Messages, m)
		n += len(m.Content) + 40
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(req); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func prose(r *rand.Rand, n int) string {
	var sb strings.Builder
	for i := range n {
		w := words[r.IntN(len(words))]
		switch r.IntN(40) {
		case 0:
			w = `"` + w + `"`
		case 1:
			w = "`" + w + "()`"
		}
		sb.WriteString(w)
		switch {
		case i == n-1:
			sb.WriteByte('.')
		case r.IntN(12) == 0:
			sb.WriteString(".\n")
		case r.IntN(10) == 0:
			sb.WriteString(", ")
		default:
			sb.WriteByte(' ')
		}
	}
	return sb.String()
}
