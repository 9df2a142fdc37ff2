package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
	"github.com/prefixcache/caddy-prefixcache/bench/workload"
)

// Bound is the upper bound of the token hit rate of a workload: the hit
// rate one engine would get if its KV cache never evicted, over the same
// request sequence.
type Bound struct {
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	HitRate      float64 `json:"hit_rate"`
}

// UpperBound replays w's requests one at a time, conversation after
// conversation, into a single engine configured like cfg but with a KV
// cache larger than all of w's text and no simulated time. The engine's own
// tokenizer, chat template and block hashing decide what is a hit, so the
// bound is comparable with the fleet's figures; an infinite cache makes the
// hit rate independent of the order of conversations.
func UpperBound(ctx context.Context, w *workload.Workload, cfg engine.Config) (Bound, error) {
	// Pseudo-word text is 4 bytes per token and no text is under 1; 3
	// bytes per token leaves room for the template and JSON of tools.
	tokens := w.TextBytes()/3 + 64*w.Requests()
	cfg.KVBlocks = tokens/cfg.BlockSize + 1024
	cfg.TimeScale = 0
	e, err := engine.New(cfg)
	if err != nil {
		return Bound{}, fmt.Errorf("starting the bound's engine: %w", err)
	}
	defer e.Close()

	var b Bound
	for _, c := range w.Conversations {
		s := c.NewSession(w.Model, false)
		for !s.Done() {
			if err := ctx.Err(); err != nil {
				return Bound{}, err
			}
			_, body, err := s.Next()
			if err != nil {
				return Bound{}, err
			}
			answer, prompt, cached, err := complete(ctx, e, body)
			if err != nil {
				return Bound{}, fmt.Errorf("conversation %s turn %d: %w", c.ID, s.Turn(), err)
			}
			b.PromptTokens += int64(prompt)
			b.CachedTokens += int64(cached)
			s.Answer(answer)
		}
	}
	// Blocks are evicted only once more have been allocated than exist:
	// at most one per block of tokens computed, plus a partial block of
	// prompt and one of output per request.
	st := e.Stats()
	if alloc := (st.PrefillTokens+st.GeneratedTokens)/int64(cfg.BlockSize) + 2*st.Requests; alloc > int64(cfg.KVBlocks) {
		return Bound{}, fmt.Errorf("the bound's engine may have evicted: %d blocks allocated of %d", alloc, cfg.KVBlocks)
	}
	if b.PromptTokens > 0 {
		b.HitRate = float64(b.CachedTokens) / float64(b.PromptTokens)
	}
	return b, nil
}

// completion is the part of a non-streamed chat completion read back.
type completion struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// complete serves one non-streamed chat completion in process.
func complete(ctx context.Context, e *engine.Engine, body []byte) (answer string, prompt, cached int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return "", 0, 0, fmt.Errorf("status %d: %s", rec.Code, bytes.TrimSpace(rec.Body.Bytes()))
	}
	var c completion
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
		return "", 0, 0, fmt.Errorf("decoding completion: %w", err)
	}
	if len(c.Choices) > 0 {
		answer = c.Choices[0].Message.Content
	}
	return answer, c.Usage.PromptTokens, c.Usage.PromptTokensDetails.CachedTokens, nil
}
