package engine

import (
	"encoding/json"
	"errors"
)

// PromptTokens returns the prompt tokens an engine computes for a request
// body sent to path (/v1/chat/completions, /v1/completions or
// /v1/messages): the chat template rendered and tokenized exactly as the
// handlers do, before any truncation to the context length. It is the
// model's tokenizer and chat template for a router that has them, as
// NVIDIA Dynamo's frontend preprocesses every request into token ids
// before routing it. It does not validate what the handlers would reject
// for other reasons (n, max_tokens).
func PromptTokens(path string, body []byte) ([]uint32, error) {
	switch path {
	case "/v1/chat/completions":
		var req chatRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		turns, err := chatTurns(req.Messages)
		if err != nil {
			return nil, err
		}
		prompt, err := renderTurns(turns, req.Tools)
		if err != nil {
			return nil, err
		}
		return tokenize(nil, prompt), nil
	case "/v1/completions":
		var req completionRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		return promptTokens(req.Prompt)
	case "/v1/messages":
		var req messagesRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		turns, err := anthropicTurns(req.System, req.Messages)
		if err != nil {
			return nil, err
		}
		prompt, err := renderTurns(turns, req.Tools)
		if err != nil {
			return nil, err
		}
		return tokenize(nil, prompt), nil
	}
	return nil, errors.New("no prompt at " + path)
}
