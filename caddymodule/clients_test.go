package caddymodule_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
)

// The official OpenAI and Anthropic Node.js SDKs, pinned in
// ../clients/package.json, talk HTTPS to a `tls internal` Caddy, trusting
// its local root through NODE_EXTRA_CA_CERTS, in front of simulated
// engines. Each multi-turn conversation must stay on one engine, and the
// engine must say so: every later turn finds the earlier turns in its
// prefix cache.

const (
	// clientsMinNode is the oldest Node.js major version both SDKs support.
	clientsMinNode = 20

	// upstreamHeader names the engine that answered, set by Caddy.
	upstreamHeader = "X-Upstream"

	// Conversations per client run, and turns per conversation. With 4
	// engines, all conversations landing on one has probability 4^-9.
	clientConversations = 10
	clientTurns         = 3
	clientMaxTokens     = 12
)

// clientSpec is the input of the scripts in ../clients (conversation.mjs).
type clientSpec struct {
	BaseURL        string               `json:"baseURL"`
	Stream         bool                 `json:"stream"`
	Model          string               `json:"model"`
	MaxTokens      int                  `json:"maxTokens"`
	UpstreamHeader string               `json:"upstreamHeader"`
	Conversations  []clientConversation `json:"conversations"`
}

type clientConversation struct {
	System string   `json:"system"`
	User   []string `json:"user"`
}

// clientTurn is one line of a script's output.
type clientTurn struct {
	Conversation int    `json:"conversation"`
	Turn         int    `json:"turn"`
	Upstream     string `json:"upstream"`
	Text         string `json:"text"`
	Chunks       int    `json:"chunks"`
	Finish       string `json:"finish"`
	Usage        *struct {
		PromptTokens     int  `json:"promptTokens"`
		CompletionTokens int  `json:"completionTokens"`
		CachedTokens     *int `json:"cachedTokens"`
	} `json:"usage"`
}

func TestClients(t *testing.T) {
	dir := clientsDir(t)

	fleet, cfg := startSimulatedFleet(t, 4, 0)
	addrs := fleet.Addrs()

	port := freePort(t)
	storage := startCaddy(t, fmt.Sprintf(`https://localhost:%d {
	tls internal
	reverse_proxy %s {
		lb_policy prefix_cache
		header_down %s {http.reverse_proxy.upstream.hostport}
	}
}
`, port, strings.Join(addrs, " "), upstreamHeader))
	rootFile := filepath.Join(storage, "pki", "authorities", "local", "root.crt")
	rootPEM, err := os.ReadFile(rootFile)
	if err != nil {
		t.Fatalf("reading Caddy's local root: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatal("no certificate in Caddy's root.crt")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitForCertificate(t, ctx, fmt.Sprintf("localhost:%d", port), roots)
	baseURL := fmt.Sprintf("https://localhost:%d", port)

	cases := []struct {
		name   string
		script string
		stream bool
		finish string // finish reason of an answer cut at max tokens
	}{
		{"openai chat", "openai_chat.mjs", false, "length"},
		{"openai chat stream", "openai_chat.mjs", true, "length"},
		{"anthropic messages", "anthropic_messages.mjs", false, "max_tokens"},
		{"anthropic messages stream", "anthropic_messages.mjs", true, "max_tokens"},
	}
	before := fleetRequests(fleet)
	var mu sync.Mutex
	served := map[string]int{} // upstream -> answers that named it
	// The clients run at once: their conversations are distinct, and a
	// handful of requests in flight is far below the load bound.
	t.Run("sdk", func(t *testing.T) {
		for _, tt := range cases {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				spec := clientSpec{
					BaseURL:        baseURL,
					Stream:         tt.stream,
					Model:          "sim-model",
					MaxTokens:      clientMaxTokens,
					UpstreamHeader: upstreamHeader,
				}
				for c := range clientConversations {
					conv := clientConversation{System: "You are a helpful assistant."}
					for turn := range clientTurns {
						conv.User = append(conv.User, words(fmt.Sprintf("%s-conv%d-user%d", tt.name, c, turn), 60))
					}
					spec.Conversations = append(spec.Conversations, conv)
				}
				turns, stderr, err := runClient(ctx, dir, tt.script, rootFile, spec)
				mu.Lock()
				for _, got := range turns {
					served[got.Upstream]++
				}
				mu.Unlock()
				if err != nil {
					t.Fatalf("node %s: %v\n%s", tt.script, err, stderr)
				}
				if want := clientConversations * clientTurns; len(turns) != want {
					t.Fatalf("node %s printed %d turns, want %d", tt.script, len(turns), want)
				}

				home := map[int]string{} // conversation -> engine of its first turn
				prompt := map[int]int{}  // conversation -> prompt tokens of its last turn
				for _, got := range turns {
					c, turn := got.Conversation, got.Turn
					if !checkClientTurn(t, got, tt.stream, tt.finish, addrs) {
						continue
					}
					if turn == 0 {
						home[c] = got.Upstream
					} else {
						if got.Upstream != home[c] {
							t.Errorf("conversation %d turn %d went to %s, want %s (its first turn's engine)", c, turn, got.Upstream, home[c])
						}
						// The engine's own account: the previous turn's
						// prompt is in its prefix cache, in whole blocks.
						if cached := *got.Usage.CachedTokens; cached < prompt[c]-cfg.BlockSize {
							t.Errorf("conversation %d turn %d: engine reports %d cached tokens, want at least %d of the previous turn's %d prompt tokens",
								c, turn, cached, prompt[c]-cfg.BlockSize, prompt[c])
						}
					}
					prompt[c] = got.Usage.PromptTokens
				}
				homes := map[string]int{}
				for _, h := range home {
					homes[h]++
				}
				if len(homes) < 2 {
					t.Errorf("%d conversations all started on %v, want them spread over at least 2 of %d engines", clientConversations, homes, len(addrs))
				}
				t.Logf("conversations per engine: %v", homes)
			})
		}

		// Without Caddy's root the clients refuse the certificate, so the
		// runs above verified it. No engine sees these requests.
		for _, script := range []string{"openai_chat.mjs", "anthropic_messages.mjs"} {
			t.Run("untrusted root "+script, func(t *testing.T) {
				t.Parallel()
				spec := clientSpec{
					BaseURL:        baseURL,
					Model:          "sim-model",
					MaxTokens:      clientMaxTokens,
					UpstreamHeader: upstreamHeader,
					Conversations:  []clientConversation{{System: "sys", User: []string{"hello"}}},
				}
				turns, stderr, err := runClient(ctx, dir, script, "", spec)
				if err == nil {
					t.Errorf("node %s without Caddy's root succeeded with %d turns, want a certificate error", script, len(turns))
				} else if !strings.Contains(stderr, "certificate") {
					t.Errorf("node %s without Caddy's root: %v, want a certificate error; stderr:\n%s", script, err, stderr)
				}
			})
		}
	})

	// The engines counted what the header claims, and nothing more: no
	// retries, no request elsewhere, none from the untrusting clients.
	after := fleetRequests(fleet)
	for i, addr := range addrs {
		if n := int(after[i] - before[i]); n != served[addr] {
			t.Errorf("engine %s received %d requests, but %d answers named it in %s", addr, n, served[addr], upstreamHeader)
		}
	}
}

// checkClientTurn checks that one answer arrived whole, and reports whether
// its usage can be read.
func checkClientTurn(t *testing.T, got clientTurn, stream bool, finish string, addrs []string) bool {
	t.Helper()
	at := fmt.Sprintf("conversation %d turn %d", got.Conversation, got.Turn)
	known := false
	for _, a := range addrs {
		known = known || got.Upstream == a
	}
	if !known {
		t.Errorf("%s: %s = %q, want one of the engines %v", at, upstreamHeader, got.Upstream, addrs)
	}
	if strings.TrimSpace(got.Text) == "" {
		t.Errorf("%s: empty answer", at)
	}
	// The engine sends the tokens made since its last write in one event,
	// so an answer may arrive in one text event, between the events that
	// open the stream and those carrying the finish reason and usage.
	if stream && got.Chunks < 1 {
		t.Errorf("%s: answer in %d streamed text events, want at least 1", at, got.Chunks)
	}
	if got.Finish != finish {
		t.Errorf("%s: finish reason %q, want %q", at, got.Finish, finish)
	}
	switch u := got.Usage; {
	case u == nil:
		t.Errorf("%s: no usage", at)
		return false
	case u.PromptTokens <= 0 || u.CompletionTokens != clientMaxTokens || u.CachedTokens == nil:
		t.Errorf("%s: usage prompt %d, completion %d, cached %v; want prompt > 0, completion %d, cached reported",
			at, u.PromptTokens, u.CompletionTokens, u.CachedTokens, clientMaxTokens)
		return false
	}
	return true
}

// fleetRequests returns how many requests each engine has received.
func fleetRequests(f *engine.Fleet) []int64 {
	var n []int64
	for _, s := range f.Stats() {
		n = append(n, s.Requests)
	}
	return n
}

// runClient runs a script of ../clients on spec and parses its output, the
// turns it completed also when it fails. An empty caFile runs it without
// NODE_EXTRA_CA_CERTS.
func runClient(ctx context.Context, dir, script, caFile string, spec clientSpec) ([]clientTurn, string, error) {
	in, err := json.Marshal(spec)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		// Whatever the environment says, the client verifies Caddy's
		// certificate against the default roots plus caFile only.
		if !strings.HasPrefix(kv, "NODE_EXTRA_CA_CERTS=") &&
			!strings.HasPrefix(kv, "NODE_TLS_REJECT_UNAUTHORIZED=") &&
			!strings.HasPrefix(kv, "NODE_OPTIONS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if caFile != "" {
		cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+caFile)
	}
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	// The turns printed before a failure count too: their requests reached
	// the engines.
	var turns []clientTurn
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var turn clientTurn
		if err := json.Unmarshal(sc.Bytes(), &turn); err != nil {
			return turns, stderr.String(), fmt.Errorf("parsing output line %q: %w", sc.Text(), err)
		}
		turns = append(turns, turn)
	}
	if runErr != nil {
		return turns, stderr.String(), runErr
	}
	return turns, stderr.String(), sc.Err()
}

// clientsDir returns ../clients with its npm dependencies installed. It
// runs `npm ci` only when package.json or package-lock.json changed since
// the last install, so later runs reuse clients/node_modules. Without a
// usable node and npm it skips, or fails when CI is set.
func clientsDir(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			needTool(t, "%s not found in PATH: the client tests need Node.js %d or later with npm", tool, clientsMinNode)
		}
	}
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		needTool(t, "node --version: %v", err)
	}
	version := strings.TrimSpace(string(out))
	major, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(version, "v"), ".", 2)[0])
	if err != nil || major < clientsMinNode {
		needTool(t, "node %s: the client tests need Node.js %d or later", version, clientsMinNode)
	}

	dir, err := filepath.Abs(filepath.Join("..", "clients"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.New()
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(sum, "%s %d\n", name, len(b))
		sum.Write(b)
	}
	want := hex.EncodeToString(sum.Sum(nil))
	stamp := filepath.Join(dir, "node_modules", ".installed-from")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// needTool skips the test, or fails it in CI, where a missing tool must not
// pass unnoticed.
func needTool(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf("%s (CI=%s: failing instead of skipping)", msg, ci)
	}
	t.Skipf("%s; skipping (with CI=true this fails)", msg)
}
