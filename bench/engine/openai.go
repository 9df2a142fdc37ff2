package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 64 << 20

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []chatMessage     `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	Stream              bool              `json:"stream"`
	StreamOptions       *streamOptions    `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	N                   *int              `json:"n"`
	IgnoreEOS           bool              `json:"ignore_eos"` // vLLM extension
	CacheSalt           string            `json:"cache_salt"` // vLLM extension
}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	MaxTokens     *int            `json:"max_tokens"`
	N             *int            `json:"n"`
	IgnoreEOS     bool            `json:"ignore_eos"`
	CacheSalt     string          `json:"cache_salt"`
}

type usage struct {
	PromptTokens        int            `json:"prompt_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func usageOf(pr progress) *usage {
	return &usage{
		PromptTokens:        pr.promptTokens,
		TotalTokens:         pr.promptTokens + pr.outputTokens,
		CompletionTokens:    pr.outputTokens,
		PromptTokensDetails: &promptDetails{CachedTokens: pr.cachedTokens},
	}
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      *chatOutput `json:"message,omitempty"`
	Delta        *chatOutput `json:"delta,omitempty"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason *string     `json:"finish_reason"`
}

type chatOutput struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

func (e *Engine) handleChat(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	var req chatRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	turns, err := chatTurns(req.Messages)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	prompt, err := renderTurns(turns, req.Tools)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	req.Messages, req.Tools = nil, nil // hold no text while generating
	limit := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		limit = req.MaxCompletionTokens
	}
	maxTokens, err := e.maxTokens(limit, req.N)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	p := genParams{
		tokens:    tokenize(nil, prompt),
		salt:      req.CacheSalt,
		maxTokens: maxTokens,
		ignoreEOS: req.IgnoreEOS,
		eos:       pieceID(tokIMEnd),
	}
	resp := chatResponse{
		ID:      e.responseID("chatcmpl-"),
		Created: arrival.Unix(),
		Model:   e.modelName(req.Model),
	}
	if !req.Stream {
		resp.Object = "chat.completion"
		var text strings.Builder
		pr, err := e.generate(r.Context(), arrival, p, func(s string, _ progress) error {
			text.WriteString(s)
			return nil
		})
		if err != nil {
			writeGenerateError(w, err)
			return
		}
		content := text.String()
		resp.Choices = []chatChoice{{
			Message:      &chatOutput{Role: "assistant", Content: &content},
			FinishReason: &pr.finish,
		}}
		resp.Usage = usageOf(pr)
		writeJSON(w, http.StatusOK, resp)
		return
	}

	resp.Object = "chat.completion.chunk"
	sse := newSSEWriter(w)
	chunk := func(delta chatOutput, finish *string) error {
		resp.Choices = []chatChoice{{Delta: &delta, FinishReason: finish}}
		return sse.data(resp)
	}
	empty := ""
	started := false
	start := func() error {
		started = true
		return chunk(chatOutput{Role: "assistant", Content: &empty}, nil)
	}
	pr, err := e.generate(r.Context(), arrival, p, func(s string, _ progress) error {
		if !started {
			if err := start(); err != nil {
				return err
			}
		}
		if err := chunk(chatOutput{Content: &s}, nil); err != nil {
			return err
		}
		return sse.flush()
	})
	if err != nil {
		if !started {
			writeGenerateError(w, err)
		}
		return
	}
	if !started {
		start()
	}
	chunk(chatOutput{}, &pr.finish)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		resp.Choices = []chatChoice{}
		resp.Usage = usageOf(pr)
		sse.data(resp)
	}
	sse.done()
}

func (e *Engine) handleCompletions(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	var req completionRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	tokens, err := promptTokens(req.Prompt)
	if err != nil {
		writeError(w, http.StatusBadRequest, "prompt: "+err.Error())
		return
	}
	req.Prompt = nil
	maxTokens, err := e.maxTokens(req.MaxTokens, req.N)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	p := genParams{
		tokens:    tokens,
		salt:      req.CacheSalt,
		maxTokens: maxTokens,
		ignoreEOS: req.IgnoreEOS,
		leadSpace: true,
		eos:       pieceID(tokEndOfText),
	}
	resp := completionResponse{
		ID:      e.responseID("cmpl-"),
		Object:  "text_completion",
		Created: arrival.Unix(),
		Model:   e.modelName(req.Model),
	}
	if !req.Stream {
		var text strings.Builder
		pr, err := e.generate(r.Context(), arrival, p, func(s string, _ progress) error {
			text.WriteString(s)
			return nil
		})
		if err != nil {
			writeGenerateError(w, err)
			return
		}
		resp.Choices = []completionChoice{{Text: text.String(), FinishReason: &pr.finish}}
		resp.Usage = usageOf(pr)
		writeJSON(w, http.StatusOK, resp)
		return
	}

	sse := newSSEWriter(w)
	started := false
	pr, err := e.generate(r.Context(), arrival, p, func(s string, _ progress) error {
		started = true
		resp.Choices = []completionChoice{{Text: s}}
		if err := sse.data(resp); err != nil {
			return err
		}
		return sse.flush()
	})
	if err != nil {
		if !started {
			writeGenerateError(w, err)
		}
		return
	}
	resp.Choices = []completionChoice{{FinishReason: &pr.finish}}
	sse.data(resp)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		resp.Choices = []completionChoice{}
		resp.Usage = usageOf(pr)
		sse.data(resp)
	}
	sse.done()
}

// promptTokens returns the tokens of a completions prompt: a string, token
// ids, or a one-element array of either.
func promptTokens(raw json.RawMessage) ([]uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errors.New("required")
	}
	var tokens []uint32
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		tokens = tokenize(nil, s)
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, err
		}
		if len(elems) > 0 {
			if c := bytes.TrimSpace(elems[0]); len(c) > 0 && (c[0] == '"' || c[0] == '[') {
				if len(elems) != 1 {
					return nil, errors.New("batched prompts are not supported")
				}
				return promptTokens(elems[0])
			}
		}
		if err := json.Unmarshal(raw, &tokens); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("must be a string or an array of token ids")
	}
	if len(tokens) == 0 {
		return nil, errors.New("must not be empty")
	}
	return tokens, nil
}

// maxTokens resolves a request's output limit.
func (e *Engine) maxTokens(limit, n *int) (int, error) {
	if n != nil && *n != 1 {
		return 0, fmt.Errorf("n must be 1, got %d", *n)
	}
	if limit == nil {
		return e.cfg.DefaultMaxTokens, nil
	}
	if *limit < 1 {
		return 0, fmt.Errorf("max_tokens must be at least 1, got %d", *limit)
	}
	return *limit, nil
}

func (e *Engine) modelName(requested string) string {
	if requested != "" {
		return requested
	}
	return e.cfg.Model
}

func (e *Engine) responseID(prefix string) string {
	e.mu.Lock()
	e.nextID++
	id := e.nextID
	e.mu.Unlock()
	return fmt.Sprintf("%ssim%s-%d", prefix, e.idTag, id)
}

func (e *Engine) handleHealth(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}

func (e *Engine) handleModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		OwnedBy     string `json:"owned_by"`
		Root        string `json:"root"`
		MaxModelLen int    `json:"max_model_len"`
	}
	writeJSON(w, http.StatusOK, struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", []model{{e.cfg.Model, "model", e.created, "simengine", e.cfg.Model, e.cfg.maxModelLen()}}})
}

func (e *Engine) handleResetPrefixCache(w http.ResponseWriter, _ *http.Request) {
	e.ResetPrefixCache()
}

// decodeBody decodes a JSON request body into v.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// writeError writes an OpenAI-style error.
func writeError(w http.ResponseWriter, code int, msg string) {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}
	typ := "BadRequestError"
	if code >= 500 {
		typ = "ServiceUnavailableError"
	}
	writeJSON(w, code, struct {
		Error body `json:"error"`
	}{body{Message: msg, Type: typ, Code: code}})
}

// writeGenerateError reports a failed generation if the client is there.
func writeGenerateError(w http.ResponseWriter, err error) {
	if errors.Is(err, errClosed) {
		writeError(w, http.StatusServiceUnavailable, err.Error())
	}
}

// sseWriter writes server-sent events.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	buf     bytes.Buffer
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *sseWriter) start() {
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		s.w.WriteHeader(http.StatusOK)
	}
}

// data writes "data: <json>\n\n" without flushing.
func (s *sseWriter) data(v any) error { return s.event("", v) }

// event writes an event with an optional name, without flushing.
func (s *sseWriter) event(name string, v any) error {
	s.start()
	s.buf.Reset()
	if name != "" {
		s.buf.WriteString("event: " + name + "\n")
	}
	s.buf.WriteString("data: ")
	enc := json.NewEncoder(&s.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // ends with \n
		return err
	}
	s.buf.WriteByte('\n')
	_, err := s.w.Write(s.buf.Bytes())
	return err
}

func (s *sseWriter) flush() error { return s.rc.Flush() }

// done writes the OpenAI stream terminator and flushes.
func (s *sseWriter) done() {
	s.start()
	s.w.Write([]byte("data: [DONE]\n\n"))
	s.flush()
}
