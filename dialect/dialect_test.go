package dialect

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

type goldenCase struct {
	name      string
	body      string
	kind      Kind
	model     string // "" if absent
	text      string
	placement int // -1: the whole text
}

// Bodies as the official clients send them (openai-python/httpx, the
// OpenAI and Anthropic TypeScript SDKs, the sglang Python client).
var goldenCases = []goldenCase{
	// OpenAI chat completions.
	{
		name:      "chat/string content",
		body:      `{"messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello!\nWhat's the capital of France?"}], "model": "gpt-4o-mini", "stream": true, "temperature": 0.7}`,
		kind:      Chat,
		model:     "gpt-4o-mini",
		text:      msg("system") + "You are a helpful assistant." + msg("user") + "Hello!\nWhat's the capital of France?",
		placement: -1,
	},
	{
		name:  "chat/multi-turn placement",
		body:  `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"developer","content":"Answer briefly."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello! How can I help?"},{"role":"user","content":"Tell me a joke"}],"max_completion_tokens":256}`,
		kind:  Chat,
		model: "meta-llama/Llama-3.1-8B-Instruct",
		text: msg("developer") + "Answer briefly." + msg("user") + "Hi" +
			msg("assistant") + "Hello! How can I help?" + msg("user") + "Tell me a joke",
		placement: len(msg("developer") + "Answer briefly." + msg("user") + "Hi"),
	},
	{
		name:  "chat/image and text parts",
		body:  `{"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "text", "text": "What's in this image?"}, {"type": "image_url", "image_url": {"url": "https:\/\/upload.wikimedia.org\/wikipedia\/commons\/d\/dd\/Gfp-wisconsin-madison-the-nature-boardwalk.jpg", "detail": "high"}}, {"type": "text", "text": "Answer in French."}, {"type": "text", "text": "Be brief."}]}], "max_tokens": 300}`,
		kind:  Chat,
		model: "gpt-4o",
		text: msg("user") + "What's in this image?" +
			image("https://upload.wikimedia.org/wikipedia/commons/d/dd/Gfp-wisconsin-madison-the-nature-boardwalk.jpg") +
			"Answer in French.\nBe brief.",
		placement: -1,
	},
	{
		name:      "chat/one text part equals string content",
		body:      `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]}]}`,
		kind:      Chat,
		model:     "gpt-4o",
		text:      msg("user") + "Hello",
		placement: -1,
	},
	{
		name:  "chat/tool calls and results",
		body:  `{"model":"gpt-4o","messages":[{"role":"user","content":"What's the weather in Paris?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_abc123","type":"function","function":{"name":"get_weather","arguments":"{\"location\": \"Paris, France\"}"}}]},{"role":"tool","tool_call_id":"call_abc123","content":"{\"temperature\": 18, \"unit\": \"celsius\"}"},{"role":"assistant","content":"It is 18 \u00b0C in Paris."}],"tools":[{"type":"function","function":{"name":"get_weather","description":"Get the current weather","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}],"tool_choice":"auto","parallel_tool_calls":true}`,
		kind:  Chat,
		model: "gpt-4o",
		text: toolsSec(`[{"type":"function","function":{"name":"get_weather","description":"Get the current weather","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}]`) +
			msg("user") + "What's the weather in Paris?" +
			msg("assistant") + toolCall("get_weather", `{"location": "Paris, France"}`) +
			msg("tool") + `{"temperature": 18, "unit": "celsius"}` +
			msg("assistant") + "It is 18 °C in Paris.",
		placement: len(toolsSec(`[{"type":"function","function":{"name":"get_weather","description":"Get the current weather","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}]`) +
			msg("user") + "What's the weather in Paris?"),
	},
	{
		name:      "chat/content and tool call, legacy function_call",
		body:      `{"model":"gpt-3.5-turbo","messages":[{"role":"user","content":"Hi"},{"content":"Let me check.","role":"assistant","function_call":{"name":"lookup","arguments":"{}"}},{"role":"function","name":"lookup","content":"ok"}]}`,
		kind:      Chat,
		model:     "gpt-3.5-turbo",
		text:      msg("user") + "Hi" + msg("assistant") + "Let me check." + toolCall("lookup", "{}") + msg("function") + "ok",
		placement: len(msg("user") + "Hi"),
	},
	{
		name:      "chat/audio part and unicode escapes",
		body:      `{"model":"gpt-4o-audio-preview","messages":[{"role":"user","content":[{"type":"text","text":"caf\u00e9 \ud83d\ude00 \"q\" \\ \t"},{"type":"input_audio","input_audio":{"data":"UklGRiQAAABXQVZFZm10IBAAAAABAAEA","format":"wav"}}]}]}`,
		kind:      Chat,
		model:     "gpt-4o-audio-preview",
		text:      msg("user") + "café 😀 \"q\" \\ \t" + part("audio", digest("UklGRiQAAABXQVZFZm10IBAAAAABAAEA")),
		placement: -1,
	},
	{
		name:      "chat/unknown part type is digested",
		body:      `{"model":"Qwen/Qwen2.5-VL-7B-Instruct","messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"https://example.com/v.mp4"}},{"type":"text","text":"Describe."}]}]}`,
		kind:      Chat,
		model:     "Qwen/Qwen2.5-VL-7B-Instruct",
		text:      msg("user") + "\x1dvideo_url\x1f" + le32(8) + membersDigest("video_url", `{"url":"https://example.com/v.mp4"}`) + "Describe.",
		placement: -1,
	},
	{
		// Keys and types are compared and rendered unescaped; a key too
		// long to compare still seeds the digest unescaped.
		name:  "chat/escaped names",
		body:  `{"model":"m","messages":[{"r\u006fle":"user","content":[{"type":"te\u0078t","text":"a"},{"type":"vid\u0065o_url","video_url":"v","` + strings.Repeat(`\u006b`, 40) + `":1}]}]}`,
		kind:  Chat,
		model: "m",
		text: msg("user") + "a" + "\x1dvideo_url\x1f" + le32(8) +
			membersDigest("video_url", `"v"`, strings.Repeat("k", 40), `1`),
		placement: -1,
	},
	{
		name:      "chat/no user message",
		body:      `{"model":"m","messages":[{"role":"system","content":"Be terse."}]}`,
		kind:      Chat,
		model:     "m",
		text:      msg("system") + "Be terse.",
		placement: -1,
	},
	{
		name:      "chat/empty messages",
		body:      `{"model":"m","messages":[]}`,
		kind:      Chat,
		model:     "m",
		text:      "",
		placement: -1,
	},

	// OpenAI completions.
	{
		name:      "completions/string",
		body:      `{"model": "gpt-3.5-turbo-instruct", "prompt": "Say this is a test\n", "max_tokens": 7, "temperature": 0}`,
		kind:      Completions,
		model:     "gpt-3.5-turbo-instruct",
		text:      "Say this is a test\n",
		placement: -1,
	},
	{
		name:      "completions/array of strings",
		body:      `{"model":"Qwen/Qwen2.5-1.5B","prompt":["Once upon a time","The quick brown fox"],"n":2}`,
		kind:      Completions,
		model:     "Qwen/Qwen2.5-1.5B",
		text:      "Once upon a time\x1eThe quick brown fox",
		placement: -1,
	},
	{
		name:      "completions/token ids",
		body:      `{"model":"Qwen/Qwen2.5-1.5B","prompt":[151644, 8948, 198, 0, 4294967295],"echo":false}`,
		kind:      Completions,
		model:     "Qwen/Qwen2.5-1.5B",
		text:      tokens(151644, 8948, 198, 0, 4294967295),
		placement: -1,
	},
	{
		name:      "completions/array of token id arrays",
		body:      `{"model":"Qwen/Qwen2.5-1.5B","prompt":[[1,2,3],[4]]}`,
		kind:      Completions,
		model:     "Qwen/Qwen2.5-1.5B",
		text:      tokens(1, 2, 3) + "\x1e" + tokens(4),
		placement: -1,
	},

	// OpenAI Responses.
	{
		name:      "responses/string input",
		body:      `{"model":"gpt-4.1","instructions":"You are a coding assistant that talks like a pirate.","input":"Are semicolons optional in JavaScript?","store":false}`,
		kind:      Responses,
		model:     "gpt-4.1",
		text:      msg("system") + "You are a coding assistant that talks like a pirate." + msg("user") + "Are semicolons optional in JavaScript?",
		placement: -1,
	},
	{
		name:  "responses/items",
		body:  `{"model":"gpt-4.1","input":[{"role":"developer","content":"Talk like a pirate."},{"role":"user","content":[{"type":"input_text","text":"what is in this image?"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo=","detail":"auto"}]},{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"A map.","annotations":[]}]},{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},{"type":"function_call_output","call_id":"call_1","output":"18C"}],"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],"reasoning":{"effort":"low"}}`,
		kind:  Responses,
		model: "gpt-4.1",
		text: toolsSec(`[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]`) +
			msg("developer") + "Talk like a pirate." +
			msg("user") + "what is in this image?" + image("data:image/png;base64,iVBORw0KGgo=") +
			msg("assistant") + "A map." +
			"\x1dreasoning\x1f" + le32(8) + membersDigest("id", `"rs_1"`, "summary", `[]`) +
			msg("assistant") + toolCall("get_weather", `{"city":"Paris"}`) +
			msg("tool") + "18C",
		placement: len(toolsSec(`[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]`) +
			msg("developer") + "Talk like a pirate." +
			msg("user") + "what is in this image?" + image("data:image/png;base64,iVBORw0KGgo=")),
	},

	// Anthropic Messages.
	{
		name:      "anthropic/system string",
		body:      `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"You are a world-class poet.","messages":[{"role":"user","content":"Write a haiku about caching."}]}`,
		kind:      Messages,
		model:     "claude-sonnet-4-5",
		text:      msg("system") + "You are a world-class poet." + msg("user") + "Write a haiku about caching.",
		placement: -1,
	},
	{
		name:  "anthropic/system blocks with cache_control, image",
		body:  `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":[{"type":"text","text":"You are an AI assistant.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"<doc>Pride and Prejudice</doc>"}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4AAQSkZJRg=="}},{"type":"text","text":"Describe this image.","cache_control":{"type":"ephemeral"}}]}]}`,
		kind:  Messages,
		model: "claude-sonnet-4-5",
		text: msg("system") + "You are an AI assistant.\n<doc>Pride and Prejudice</doc>" +
			msg("user") + image("/9j/4AAQSkZJRg==") + "Describe this image.",
		placement: -1,
	},
	{
		name:  "anthropic/tool_use and tool_result",
		body:  `{"model":"claude-opus-4-1","max_tokens":1024,"tools":[{"name":"get_weather","description":"Get the current weather in a given location","input_schema":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}],"messages":[{"role":"user","content":"What is the weather like in San Francisco?"},{"role":"assistant","content":[{"type":"thinking","thinking":"I should call get_weather.","signature":"EqQBCgIYAhIM"},{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"get_weather","input":{"location": "San Francisco, CA"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01A09q90qw90lq917835lq9","content":"15 degrees"},{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"sunny"},{"type":"image","source":{"type":"url","url":"https://example.com/sky.png"}}],"is_error":false},{"type":"text","text":"Thanks"}]}]}`,
		kind:  Messages,
		model: "claude-opus-4-1",
		text: toolsSec(`[{"name":"get_weather","description":"Get the current weather in a given location","input_schema":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}]`) +
			msg("user") + "What is the weather like in San Francisco?" +
			msg("assistant") + part("thinking", "I should call get_weather.") + "Let me check." + toolCall("get_weather", `{"location": "San Francisco, CA"}`) +
			msg("user") + part("tool_result", "15 degrees") + part("tool_result", "sunny"+image("https://example.com/sky.png")) + "Thanks",
		placement: len(toolsSec(`[{"name":"get_weather","description":"Get the current weather in a given location","input_schema":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}]`) +
			msg("user") + "What is the weather like in San Francisco?"),
	},

	{
		name:      "anthropic/sdk member order (messages before system and tools)",
		body:      `{"max_tokens":1024,"messages":[{"role":"user","content":"Hi"}],"model":"claude-haiku-4-5","system":"Be brief.","tools":[{"name":"t","input_schema":{"type":"object"}}]}`,
		kind:      Messages,
		model:     "claude-haiku-4-5",
		text:      toolsSec(`[{"name":"t","input_schema":{"type":"object"}}]`) + msg("system") + "Be brief." + msg("user") + "Hi",
		placement: -1,
	},
	{
		name:      "anthropic/tool_result without content, empty tools",
		body:      `{"model":"claude","tools":[],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1"}]}]}`,
		kind:      Messages,
		model:     "claude",
		text:      msg("user") + part("tool_result", ""),
		placement: -1,
	},
	{
		name:      "responses/null instructions and input",
		body:      `{"model":"gpt-4.1","instructions":null,"input":null,"previous_response_id":"resp_1"}`,
		kind:      Responses,
		model:     "gpt-4.1",
		text:      "",
		placement: -1,
	},

	// SGLang /generate.
	{
		name:      "generate/text",
		body:      `{"text": "The capital of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 32}, "stream": false}`,
		kind:      Generate,
		text:      "The capital of France is",
		placement: -1,
	},
	{
		name:      "generate/text batch",
		body:      `{"text":["Hello, my name is","The future of AI is"],"sampling_params":{"temperature":0.8}}`,
		kind:      Generate,
		text:      "Hello, my name is\x1eThe future of AI is",
		placement: -1,
	},
	{
		name:      "generate/input_ids",
		body:      `{"input_ids":[128000,791,6864,315,9822,374],"sampling_params":{"max_new_tokens":8},"return_logprob":false}`,
		kind:      Generate,
		text:      tokens(128000, 791, 6864, 315, 9822, 374),
		placement: -1,
	},
	{
		name:      "generate/text and input_ids",
		body:      `{"input_ids":[7,8],"text":"ab","sampling_params":{}}`,
		kind:      Generate,
		text:      "ab\x1e" + tokens(7, 8),
		placement: -1,
	},
	{
		name:      "generate/input_ids null",
		body:      `{"text":"ab","input_ids":null}`,
		kind:      Generate,
		text:      "ab",
		placement: -1,
	},
	{
		name:      "generate/input_ids batch",
		body:      `{"input_ids":[[1,2],[3,4,5]]}`,
		kind:      Generate,
		text:      tokens(1, 2) + "\x1e" + tokens(3, 4, 5),
		placement: -1,
	},
}

func TestAppendGolden(t *testing.T) {
	for _, tt := range goldenCases {
		t.Run(tt.name, func(t *testing.T) {
			got, req, err := Append(nil, []byte(tt.body))
			if err != nil {
				t.Fatalf("Append(%s) error: %v", tt.name, err)
			}
			if string(got) != tt.text {
				t.Errorf("Append(%s) text =\n  %q\nwant\n  %q", tt.name, got, tt.text)
			}
			if req.Kind != tt.kind {
				t.Errorf("Append(%s) Kind = %v, want %v", tt.name, req.Kind, tt.kind)
			}
			if string(req.Model) != tt.model || (tt.model != "") != (req.Model != nil) {
				t.Errorf("Append(%s) Model = %q, want %q", tt.name, req.Model, tt.model)
			}
			want := tt.placement
			if want < 0 {
				want = len(tt.text)
			}
			if req.Placement != want {
				t.Errorf("Append(%s) Placement = %d, want %d (key %q)", tt.name, req.Placement, want, tt.text[:min(want, len(tt.text))])
			}
		})
	}
}

func TestAppendToExisting(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	dst := []byte("prefix")
	got, req, err := Append(dst, body)
	if err != nil {
		t.Fatalf("Append(%q, body) error: %v", dst, err)
	}
	if want := "prefix" + msg("user") + "hi"; string(got) != want {
		t.Errorf("Append(%q, body) = %q, want %q", dst, got, want)
	}
	if want := len(msg("user") + "hi"); req.Placement != want {
		t.Errorf("Append(%q, body) Placement = %d, want %d (relative to the appended text)", dst, req.Placement, want)
	}
}

func TestModelAndCacheSalt(t *testing.T) {
	tests := []struct {
		name, body, model, salt string
		nilModel, nilSalt       bool
	}{
		{name: "both", body: `{"cache_salt":"tenant-\u00e9","model":"a\/b","prompt":"x"}`, model: `a\/b`, salt: `tenant-\u00e9`},
		{name: "absent", body: `{"prompt":"x"}`, nilModel: true, nilSalt: true},
		{name: "not strings", body: `{"model":null,"cache_salt":7,"prompt":"x"}`, nilModel: true, nilSalt: true},
		{name: "empty model", body: `{"model":"","prompt":"x"}`, nilSalt: true},
		{name: "last duplicate wins", body: `{"model":"a","prompt":"x","model":"b"}`, model: "b", nilSalt: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, req, err := Append(nil, []byte(tt.body))
			if err != nil {
				t.Fatalf("Append(%s) error: %v", tt.body, err)
			}
			if string(req.Model) != tt.model || (req.Model == nil) != tt.nilModel {
				t.Errorf("Append(%s) Model = %q (nil %v), want %q (nil %v)", tt.body, req.Model, req.Model == nil, tt.model, tt.nilModel)
			}
			if string(req.CacheSalt) != tt.salt || (req.CacheSalt == nil) != tt.nilSalt {
				t.Errorf("Append(%s) CacheSalt = %q (nil %v), want %q (nil %v)", tt.body, req.CacheSalt, req.CacheSalt == nil, tt.salt, tt.nilSalt)
			}
			if cap(req.Model) != len(req.Model) {
				t.Errorf("Append(%s) cap(Model) = %d, want %d: appending to it would overwrite the body", tt.body, cap(req.Model), len(req.Model))
			}
		})
	}
}

func TestKindString(t *testing.T) {
	tests := []struct {
		k    Kind
		want string
	}{
		{Unknown, "unknown"}, {Chat, "openai_chat"}, {Completions, "openai_completions"},
		{Responses, "openai_responses"}, {Messages, "anthropic_messages"},
		{Generate, "sglang_generate"}, {Kind(200), "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.k.String(); got != tt.want {
				t.Errorf("Kind(%d).String() = %q, want %q", tt.k, got, tt.want)
			}
		})
	}
}

func TestEscapingDoesNotChangeText(t *testing.T) {
	// One Anthropic request with tools-free content, serialised by
	// Python (ASCII only), JavaScript and a slash-escaping serialiser.
	req := obj{
		{"model", "claude"},
		{"system", "Tu es un assistant. 東京 😀 a/b"},
		{"messages", arr{
			obj{{"role", "user"}, {"content", arr{
				obj{{"type", "image"}, {"source", obj{{"type", "base64"}, {"media_type", "image/png"}, {"data", "iVBOR/w0KG+go="}}}},
				obj{{"type", "text"}, {"text", "Qu'est-ce que c'est ?\n\t\"naïve\" C:\\dir"}},
			}}},
			obj{{"role", "assistant"}, {"content", "Une image 🖼️ d'un chat."}},
		}},
	}
	var want []byte
	for i, st := range styles {
		body := st.encode(req)
		got, _, err := Append(nil, body)
		if err != nil {
			t.Fatalf("Append(%s) error: %v", body, err)
		}
		if i == 0 {
			want = got
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Append(%s) =\n  %q\nwant (as serialised by styles[0])\n  %q", body, got, want)
		}
	}
}

// errorCases are bodies Append rejects, with the sentinel it returns.
var errorCases = []struct {
	name string
	body string
	want error
}{
	{"empty", ``, ErrNotJSON},
	{"whitespace", " \n\t", ErrNotJSON},
	{"form data", `model=gpt&prompt=hi`, ErrNotJSON},
	{"gzip", "\x1f\x8b\x08\x00\x00\x00", ErrNotJSON},
	{"bom", "\xef\xbb\xbf{}", ErrNotJSON},
	{"truncated object", `{"model":"m","messages":[{"role":"user","content":"hel`, ErrSyntax},
	{"truncated after key", `{"model"`, ErrSyntax},
	{"truncated after colon", `{"model":`, ErrSyntax},
	{"truncated after comma", `{"model":"m",`, ErrSyntax},
	{"missing colon", `{"model" "m"}`, ErrSyntax},
	{"missing comma", `{"model":"m" "prompt":"x"}`, ErrSyntax},
	{"trailing comma", `{"prompt":"x",}`, ErrSyntax},
	{"trailing data", `{"prompt":"x"} {}`, ErrSyntax},
	{"bad literal", `{"stream":tru,"prompt":"x"}`, ErrSyntax},
	{"bad number", `{"temperature":1.,"prompt":"x"}`, ErrSyntax},
	{"mismatched brackets", `{"metadata":{"a":[1,2}},"prompt":"x"}`, ErrSyntax},
	{"invalid escape", `{"prompt":"a\qb"}`, ErrSyntax},
	{"invalid unicode escape", `{"prompt":"a\u12G4"}`, ErrSyntax},
	{"truncated unicode escape", `{"prompt":"a\u12`, ErrSyntax},
	{"truncated in escape", `{"prompt":"a\`, ErrSyntax},
	{"unterminated skipped string", `{"user":"abc}`, ErrSyntax},
	{"deep nesting", `{"metadata":` + strings.Repeat("[", 100000), ErrSyntax},
	{"deep nesting top", strings.Repeat("[", 100000), ErrSyntax},
	{"deep nesting objects", strings.Repeat(`{"a":`, 100000), ErrSyntax},
	{"huge unterminated string", `{"prompt":"` + strings.Repeat("x", 1<<20), ErrSyntax},
	{"top-level array", `[{"prompt":"x"}]`, ErrUnknownDialect},
	{"top-level string", `"hello"`, ErrUnknownDialect},
	{"no known member", `{"model":"gpt-4o","temperature":0.2}`, ErrUnknownDialect},
	{"empty object", `{}`, ErrUnknownDialect},
	{"messages not array", `{"messages":"hi"}`, ErrUnknownDialect},
	{"message not object", `{"messages":["hi"]}`, ErrUnknownDialect},
	{"message without role", `{"messages":[{"content":"hi"}]}`, ErrUnknownDialect},
	{"content is number", `{"messages":[{"role":"user","content":1}]}`, ErrUnknownDialect},
	{"prompt is object", `{"prompt":{"a":1}}`, ErrUnknownDialect},
	{"negative token id", `{"prompt":[1,-2]}`, ErrUnknownDialect},
	{"fractional token id", `{"prompt":[1,2.5]}`, ErrUnknownDialect},
	{"token id too big", `{"input_ids":[4294967296]}`, ErrUnknownDialect},
	{"mixed ids and strings", `{"prompt":[1,"a"]}`, ErrUnknownDialect},
	{"responses text object only", `{"model":"gpt-4.1","text":{"format":{"type":"text"}}}`, ErrUnknownDialect},
	{"input item not object", `{"input":[1]}`, ErrUnknownDialect},
}

func TestErrors(t *testing.T) {
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("keep")
			got, req, err := Append(dst, []byte(tt.body))
			short := tt.body[:min(len(tt.body), 60)]
			if !errors.Is(err, tt.want) {
				t.Fatalf("Append(%q...) error = %v, want %v", short, err, tt.want)
			}
			if string(got) != "keep" || len(got) != len(dst) {
				t.Errorf("Append(%q...) on error returned dst %q, want it unchanged", short, got)
			}
			if req.Kind != Unknown || req.Model != nil || req.CacheSalt != nil || req.Placement != 0 {
				t.Errorf("Append(%q...) on error returned %+v, want a zero Request", short, req)
			}
		})
	}
}

func TestErrorsHoldNoBodyText(t *testing.T) {
	const secret = "SECRET-PROMPT"
	bodies := []string{
		`{"prompt":"` + secret + `\q"}`,
		`{"` + secret + `":1}`,
		`{"messages":[{"role":"` + secret + `","content":1}]}`,
		secret,
		`{"prompt":"` + secret,
	}
	for _, body := range bodies {
		_, _, err := Append(nil, []byte(body))
		if err == nil {
			t.Fatalf("Append(%q) error = nil, want an error", body)
		}
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("Append(%q) error %q contains body text", body, err)
		}
	}
}

func TestHugeString(t *testing.T) {
	// 16 MB of prompt with an escape every 64 bytes.
	chunk := strings.Repeat("x", 62) + `\n`
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat(chunk, 1<<18) + `"}]}`
	got, req, err := Append(nil, []byte(body))
	if err != nil {
		t.Fatalf("Append(16 MB content) error: %v", err)
	}
	if want := len(msg("user")) + 63<<18; len(got) != want || req.Placement != want {
		t.Errorf("Append(16 MB content) = %d bytes, Placement %d, want %d, %d", len(got), req.Placement, want, want)
	}
}

func TestDeepNestingValid(t *testing.T) {
	// Valid JSON nested 100000 deep in an ignored member is skipped
	// without recursion.
	body := `{"metadata":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `,"prompt":"x"}`
	got, _, err := Append(nil, []byte(body))
	if err != nil || string(got) != "x" {
		t.Errorf("Append(deeply nested metadata) = %q, %v, want \"x\", nil", got, err)
	}
	// Tool results nested in tool results render one level, then are
	// digested.
	nested := strings.Repeat(`{"type":"tool_result","content":[`, 10000) + strings.Repeat(`]}`, 10000)
	body = `{"messages":[{"role":"user","content":[` + nested + `]}]}`
	if _, _, err := Append(nil, []byte(body)); err != nil {
		t.Errorf("Append(nested tool results) error: %v", err)
	}
}

func TestNoAllocs(t *testing.T) {
	bodies := map[string][]byte{}
	for _, tt := range goldenCases {
		bodies[tt.name] = []byte(tt.body)
	}
	for _, d := range benchDialects {
		bodies["generated/"+d.name] = d.gen(16 << 10)
	}
	buf := make([]byte, 0, 1<<20)
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(20, func() {
				if _, _, err := Append(buf[:0], body); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("Append(buf, %s) allocates %v times per call, want 0", name, allocs)
			}
		})
	}
}

// TestEscapedNames: keys and the values compared with names this package
// knows (part, item and tool call types; roles) are compared unescaped, as
// a JSON decoder and the engine see them, so a body that escapes them
// renders as the body that does not.
func TestEscapedNames(t *testing.T) {
	long := strings.Repeat("k", 40)
	longEsc := strings.Repeat(`\u006b`, 40)
	pairs := []struct{ name, escaped, plain string }{
		{"text part type", `{"messages":[{"role":"user","content":[{"type":"te\u0078t","text":"hi"}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`},
		{"text part type after text", `{"messages":[{"role":"user","content":[{"text":"hi","type":"input_t\u0065xt"}]}]}`,
			`{"messages":[{"role":"user","content":[{"text":"hi","type":"input_text"}]}]}`},
		{"text key", `{"messages":[{"role":"user","content":[{"type":"text","\u0074ext":"hi"}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`},
		{"image_url part", `{"messages":[{"role":"user","content":[{"type":"image\u005furl","image\u005furl":{"\u0075rl":"https://x/a.png"}}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}]}`},
		{"anthropic image", `{"messages":[{"role":"user","content":[{"type":"\u0069mage","source":{"type":"base64","d\u0061ta":"iVBOR"}}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"iVBOR"}}]}]}`},
		{"tool_result", `{"messages":[{"role":"user","content":[{"type":"tool\u005fresult","content":"15 degrees"}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"tool_result","content":"15 degrees"}]}]}`},
		{"thinking", `{"messages":[{"role":"assistant","content":[{"type":"thinkin\u0067","thinking":"hmm"}]}]}`,
			`{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"}]}]}`},
		{"tool_use", `{"messages":[{"role":"assistant","content":[{"type":"tool\u005fuse","name":"f","input":{}}]}]}`,
			`{"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]}`},
		{"item message", `{"input":[{"type":"m\u0065ssage","role":"user","content":"q"}]}`,
			`{"input":[{"type":"message","role":"user","content":"q"}]}`},
		{"item function_call", `{"input":[{"type":"function\u005fcall","name":"f","arguments":"{}"}]}`,
			`{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`},
		{"item function_call_output", `{"input":[{"type":"function_call_outpu\u0074","output":"o"}]}`,
			`{"input":[{"type":"function_call_output","output":"o"}]}`},
		{"role", `{"messages":[{"role":"\u0075ser","content":"a"},{"role":"assistant","content":"b"}]}`,
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`},
		{"digested part label", `{"messages":[{"role":"user","content":[{"type":"vid\u0065o_url","video_url":{"url":"v"}}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"v"}}]}]}`},
		{"digested item label", `{"input":[{"type":"re\u0061soning","summary":[]}]}`,
			`{"input":[{"type":"reasoning","summary":[]}]}`},
		{"digested tool call label", `{"messages":[{"role":"assistant","tool_calls":[{"type":"c\u0075stom","custom":{"input":"x"}}]}]}`,
			`{"messages":[{"role":"assistant","tool_calls":[{"type":"custom","custom":{"input":"x"}}]}]}`},
		{"long digested key", `{"messages":[{"role":"user","content":[{"type":"x","` + longEsc + `":1}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"x","` + long + `":1}]}]}`},
		{"type key in a digest", `{"messages":[{"role":"user","content":[{"\u0074ype":"x","cache\u005fcontrol":{},"a":1}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"x","a":1}]}]}`},
		{"top-level keys", `{"\u006dodel":"m","m\u0065ssages":[{"role":"user","content":"a"}],"\u0073ystem":"s"}`,
			`{"model":"m","messages":[{"role":"user","content":"a"}],"system":"s"}`},
	}
	for _, tt := range pairs {
		t.Run(tt.name, func(t *testing.T) {
			got, greq, errG := Append(nil, []byte(tt.escaped))
			want, wreq, errW := Append(nil, []byte(tt.plain))
			if errG != nil || errW != nil || !bytes.Equal(got, want) || greq.Kind != wreq.Kind || greq.Placement != wreq.Placement {
				t.Errorf("Append(%s) = %q, %v, %d, %v\nAppend(%s) = %q, %v, %d, %v\nwant equal", tt.escaped, got, greq.Kind, greq.Placement, errG, tt.plain, want, wreq.Kind, wreq.Placement, errW)
			}
		})
	}
}
