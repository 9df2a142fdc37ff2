package engine

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
)

// A minimal Anthropic Messages API: text in and out, tools rendered into the
// prompt, streaming with Anthropic's event sequence. Usage follows
// Anthropic's convention: input_tokens excludes cache_read_input_tokens.

type messagesRequest struct {
	Model     string             `json:"model"`
	System    json.RawMessage    `json:"system"`
	Messages  []anthropicMessage `json:"messages"`
	Tools     []json.RawMessage  `json:"tools"`
	MaxTokens *int               `json:"max_tokens"`
	Stream    bool               `json:"stream"`
	IgnoreEOS bool               `json:"ignore_eos"`
}

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

func anthropicUsageOf(pr progress) anthropicUsage {
	return anthropicUsage{
		InputTokens:          pr.promptTokens - pr.cachedTokens,
		OutputTokens:         pr.outputTokens,
		CacheReadInputTokens: pr.cachedTokens,
	}
}

type anthropicText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicResponse struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Model        string          `json:"model"`
	Content      []anthropicText `json:"content"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	Usage        anthropicUsage  `json:"usage"`
}

func anthropicStopReason(finish string) *string {
	s := "max_tokens"
	if finish == finishStop {
		s = "end_turn"
	}
	return &s
}

func (e *Engine) handleMessages(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	var req messagesRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	turns, err := anthropicTurns(req.System, req.Messages)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	prompt, err := renderTurns(turns, req.Tools)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	req.System, req.Messages, req.Tools = nil, nil, nil // hold no text while generating
	maxTokens, err := e.maxTokens(req.MaxTokens, nil)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	p := genParams{
		tokens:    tokenize(nil, prompt),
		maxTokens: maxTokens,
		ignoreEOS: req.IgnoreEOS,
		eos:       pieceID(tokIMEnd),
	}
	msg := anthropicResponse{
		ID:      e.responseID("msg_"),
		Type:    "message",
		Role:    "assistant",
		Model:   e.modelName(req.Model),
		Content: []anthropicText{},
	}
	if !req.Stream {
		var text strings.Builder
		pr, err := e.generate(r.Context(), arrival, p, func(s string, _ progress) error {
			text.WriteString(s)
			return nil
		})
		if err != nil {
			if errors.Is(err, errClosed) {
				writeAnthropicError(w, http.StatusServiceUnavailable, err.Error())
			}
			return
		}
		msg.Content = append(msg.Content, anthropicText{"text", text.String()})
		msg.StopReason = anthropicStopReason(pr.finish)
		msg.Usage = anthropicUsageOf(pr)
		writeJSON(w, http.StatusOK, msg)
		return
	}

	sse := newSSEWriter(w)
	started := false
	start := func(pr progress) {
		started = true
		msg.Usage = anthropicUsageOf(pr)
		sse.event("message_start", map[string]any{"type": "message_start", "message": msg})
		sse.event("content_block_start", map[string]any{
			"type": "content_block_start", "index": 0,
			"content_block": anthropicText{"text", ""},
		})
	}
	pr, err := e.generate(r.Context(), arrival, p, func(s string, pr progress) error {
		if !started {
			start(pr)
		}
		if err := sse.event("content_block_delta", map[string]any{
			"type": "content_block_delta", "index": 0,
			"delta": map[string]string{"type": "text_delta", "text": s},
		}); err != nil {
			return err
		}
		return sse.flush()
	})
	if err != nil {
		if !started && errors.Is(err, errClosed) {
			writeAnthropicError(w, http.StatusServiceUnavailable, err.Error())
		}
		return
	}
	if !started {
		start(pr)
	}
	sse.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse.event("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": anthropicStopReason(pr.finish), "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": pr.outputTokens},
	})
	sse.event("message_stop", map[string]string{"type": "message_stop"})
	sse.flush()
}

func writeAnthropicError(w http.ResponseWriter, code int, msg string) {
	typ := "invalid_request_error"
	if code >= 500 {
		typ = "overloaded_error"
	}
	writeJSON(w, code, map[string]any{
		"type":  "error",
		"error": map[string]string{"type": typ, "message": msg},
	})
}
