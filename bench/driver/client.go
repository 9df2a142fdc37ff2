package driver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Record is what the client measured of one request. Durations are wall
// time.
type Record struct {
	Conversation int    `json:"conversation"`
	Turn         int    `json:"turn"`
	Session      string `json:"session"`

	// Edge is the index of the edge the request was sent to.
	Edge int `json:"edge"`

	// Sent is when the request was sent and Late how long after its
	// scheduled time, both from the start of the run.
	Sent time.Duration `json:"sent"`
	Late time.Duration `json:"late"`

	// TTFT is the time from sending to the first content token, E2E to
	// the end of the stream.
	TTFT time.Duration `json:"ttft"`
	E2E  time.Duration `json:"e2e"`

	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	OutputTokens int `json:"output_tokens"`

	// Upstream and Reason come from the response headers the Caddyfile's
	// header_down lines set.
	Upstream string `json:"upstream,omitempty"`
	Reason   string `json:"reason,omitempty"`

	Err string `json:"error,omitempty"`
}

// OK reports whether the request succeeded.
func (r *Record) OK() bool { return r.Err == "" }

// chunk is the part of a chat.completion.chunk the client reads.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// APIKey is the key the benchmark's client sends, its tenant for
// Caddyfile.example's tenant option.
const APIKey = "sk-prefixbench"

// maxErrorBody bounds the bytes of an error response kept in a record.
const maxErrorBody = 200

// stream sends one streaming chat completion request to url and fills rec
// from the response; it returns the answer's text. start is the run's
// origin for rec.Sent.
func stream(ctx context.Context, client *http.Client, url, session string, body []byte, start time.Time, rec *Record) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		rec.Err = err.Error()
		return ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(SessionHeader, session)
	// Every OpenAI-compatible client sends a key (the SDKs require one);
	// the benchmark is one client, one tenant.
	req.Header.Set("Authorization", "Bearer "+APIKey)

	sent := time.Now()
	rec.Sent = sent.Sub(start)
	defer func() { rec.E2E = time.Since(sent) }()
	resp, err := client.Do(req)
	if err != nil {
		rec.Err = err.Error()
		return ""
	}
	defer resp.Body.Close()
	rec.Upstream = resp.Header.Get(UpstreamHeader)
	rec.Reason = resp.Header.Get(ReasonHeader)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		rec.Err = fmt.Sprintf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return ""
	}

	var answer strings.Builder
	var usage, done bool
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			rec.Err = fmt.Sprintf("reading stream: %v", err)
			return ""
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			done = true
			break
		}
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			rec.Err = fmt.Sprintf("decoding chunk: %v", err)
			return ""
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" && rec.TTFT == 0 {
				rec.TTFT = time.Since(sent)
			}
			answer.WriteString(ch.Delta.Content)
		}
		if u := c.Usage; u != nil {
			usage = true
			rec.PromptTokens, rec.OutputTokens = u.PromptTokens, u.CompletionTokens
			if d := u.PromptTokensDetails; d != nil {
				rec.CachedTokens = d.CachedTokens
			}
		}
	}
	switch {
	case !done:
		rec.Err = "stream ended without [DONE]"
	case !usage:
		rec.Err = "stream had no usage chunk"
	case rec.TTFT == 0:
		rec.Err = "stream had no content"
	}
	return answer.String()
}
