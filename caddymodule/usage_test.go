package caddymodule

import (
	"fmt"
	"strings"
	"testing"
)

// Answers as the engines write them. The SSE streams end with the usage
// chunk vLLM and SGLang send when the client asked for
// stream_options.include_usage.
var usageCases = []struct {
	name string
	body string
	want usage
}{
	{"openai chat json", `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1234,"total_tokens":1240,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":1024}}}`,
		usage{1234, 1024}},
	{"openai chat json, no details", `{"usage":{"prompt_tokens":77,"completion_tokens":3,"total_tokens":80}}`, usage{77, 0}},
	{"openai json, details null", `{"usage":{"prompt_tokens":77,"completion_tokens":3,"prompt_tokens_details":null}}`, usage{77, 0}},
	{"pretty json", "{\n  \"usage\": {\n    \"prompt_tokens\" : 500,\n    \"prompt_tokens_details\": {\n      \"cached_tokens\":\t256\n    }\n  }\n}\n", usage{500, 256}},
	{"sse with a final usage chunk", "data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"content\":\"Hello\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"1\",\"choices\":[],\"usage\":{\"prompt_tokens\":4096,\"total_tokens\":4100,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":3840}}}\n\n" +
		"data: [DONE]\n\n", usage{4096, 3840}},
	{"sse with usage in every chunk, the last wins", "data: {\"usage\":{\"prompt_tokens\":900,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":100}}}\n\n" +
		"data: {\"usage\":{\"prompt_tokens\":900,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":800}}}\n\n", usage{900, 800}},
	{"anthropic stream", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":20,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":2000,\"output_tokens\":1}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n", usage{2020, 2000}},
	{"anthropic json with a cache write", `{"type":"message","usage":{"input_tokens":50,"cache_creation_input_tokens":1000,"cache_read_input_tokens":0,"output_tokens":9}}`, usage{1050, 0}},
	{"responses api", `{"object":"response","usage":{"input_tokens":328,"input_tokens_details":{"cached_tokens":256},"output_tokens":52,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":380}}`, usage{328, 256}},
	{"keys in generated text do not count", `{"choices":[{"message":{"content":"say \"prompt_tokens\": 99999 and \"cached_tokens\": 5"}}],"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":0}}}`, usage{10, 0}},
	{"no usage", `{"choices":[{"message":{"content":"hello"}}]}`, usage{-1, -1}},
	{"an error", `{"error":{"message":"bad request","type":"invalid_request_error"}}`, usage{-1, -1}},
	{"a number too long to be a count", `{"usage":{"prompt_tokens":123456789012345678901234,"prompt_tokens_details":{"cached_tokens":1}}}`, usage{-1, -1}},
}

func scanAll(writes ...[]byte) usage {
	var s usageScanner
	for _, w := range writes {
		s.write(w)
	}
	return s.usage()
}

// Every answer is read alike whole, split in two at every byte, and one
// byte at a time: a key and its value cut across writes are still seen.
func TestUsageScanner(t *testing.T) {
	for _, tc := range usageCases {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.body)
			if got := scanAll(b); got != tc.want {
				t.Fatalf("whole: %+v, want %+v", got, tc.want)
			}
			for i := range b {
				if got := scanAll(b[:i], b[i:]); got != tc.want {
					t.Fatalf("split at %d (%q|%q): %+v, want %+v", i, b[max(0, i-20):i], b[i:min(len(b), i+20)], got, tc.want)
				}
			}
			var bytewise [][]byte
			for i := range b {
				bytewise = append(bytewise, b[i:i+1])
			}
			if got := scanAll(bytewise...); got != tc.want {
				t.Fatalf("byte by byte: %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A long answer whose usage comes after many writes is read: what the
// scanner keeps between writes is bounded, not the answer.
func TestUsageScannerLongStream(t *testing.T) {
	var writes [][]byte
	for i := range 10000 {
		writes = append(writes, fmt.Appendf(nil, "data: {\"choices\":[{\"delta\":{\"content\":\"token %d\"}}],\"usage\":null}\n\n", i))
	}
	writes = append(writes, []byte(`data: {"choices":[],"usage":{"prompt_tokens":8000,"completion_tokens":10000,"prompt_tokens_details":{"cached_tokens":7936}}}`+"\n\n"))
	if got, want := scanAll(writes...), (usage{8000, 7936}); got != want {
		t.Errorf("usage %+v, want %+v", got, want)
	}
}

func TestScannable(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                 true,
		"application/json; charset=utf-8":  true,
		"text/event-stream":                true,
		"text/event-stream; charset=utf-8": true,
		"application/x-ndjson":             true,
		"text/html":                        false,
		"image/png":                        false,
		"":                                 false,
	} {
		if got := scannable(ct); got != want {
			t.Errorf("scannable(%q) = %v, want %v", ct, got, want)
		}
	}
}

// FuzzUsageScanner checks that however an answer is cut into writes, the
// scanner reads it as it reads it whole.
func FuzzUsageScanner(f *testing.F) {
	for _, tc := range usageCases {
		f.Add([]byte(tc.body), uint16(7), uint16(31))
	}
	f.Fuzz(func(t *testing.T, body []byte, a, b uint16) {
		whole := scanAll(body)
		i, j := int(a)%(len(body)+1), int(b)%(len(body)+1)
		if i > j {
			i, j = j, i
		}
		if got := scanAll(body[:i], body[i:j], body[j:]); got != whole {
			t.Fatalf("cut at %d and %d: %+v, whole: %+v", i, j, got, whole)
		}
	})
}

// BenchmarkUsageScan is the cost of reading answers at streaming rates:
// an SSE stream of 1,000 small chunks (what a client sees of a 1,000-
// token answer), and a 64 KiB JSON answer in one write.
func BenchmarkUsageScan(b *testing.B) {
	var sse [][]byte
	for i := range 1000 {
		sse = append(sse, fmt.Appendf(nil, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok%d\"},\"finish_reason\":null}]}\n\n", i))
	}
	sse = append(sse, []byte(`data: {"choices":[],"usage":{"prompt_tokens":8000,"completion_tokens":1000,"prompt_tokens_details":{"cached_tokens":7936}}}`+"\n\ndata: [DONE]\n\n"))
	var sseBytes int64
	for _, w := range sse {
		sseBytes += int64(len(w))
	}
	json := []byte(`{"choices":[{"message":{"content":"` + strings.Repeat("lorem ipsum ", 64<<10/12) + `"}}],"usage":{"prompt_tokens":8000,"completion_tokens":1000,"prompt_tokens_details":{"cached_tokens":7936}}}`)
	b.Run("sse-1000-chunks", func(b *testing.B) {
		b.SetBytes(sseBytes)
		b.ReportAllocs()
		for b.Loop() {
			if u := scanAll(sse...); u.cached != 7936 {
				b.Fatal(u)
			}
		}
	})
	b.Run("json-64KiB", func(b *testing.B) {
		b.SetBytes(int64(len(json)))
		b.ReportAllocs()
		for b.Loop() {
			if u := scanAll(json); u.cached != 7936 {
				b.Fatal(u)
			}
		}
	})
}
