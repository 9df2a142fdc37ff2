package examples_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/prefixcache/caddy-prefixcache/caddymodule"
)

// engine is a real HTTP inference engine stand-in: OpenAI chat
// completions and GET /health, like vLLM and SGLang. It can be killed
// (listener and every connection closed at once, as when the process
// dies) and started again on the same address.
type engine struct {
	name, addr string
	changed    signal

	mu       sync.Mutex
	srv      *http.Server
	gate     chan struct{} // when set, chat requests wait here and are counted in held
	held     []string      // request IDs waiting at the gate
	turns    []turn        // chat requests answered, in order
	healthOK int           // /health probes answered
	answer   int           // words per answer; 0: 30
}

// turn is one chat request an engine answered.
type turn struct {
	conv   string
	n      int // number of user messages: the turn of the conversation
	engine string
}

func startEngine(t *testing.T, name string) *engine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{name: name, addr: ln.Addr().String()}
	e.serve(ln)
	t.Cleanup(e.kill)
	return e
}

func (e *engine) serve(ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.healthOK++
		e.mu.Unlock()
		e.changed.notify()
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"test-model","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", e.chat)
	srv := &http.Server{Handler: mux}
	e.mu.Lock()
	e.srv = srv
	e.mu.Unlock()
	go srv.Serve(ln)
}

var convID = regexp.MustCompile(`^conversation (c\d+)\.`)

func (e *engine) chat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	m := convID.FindStringSubmatch(req.Messages[0].Content)
	if m == nil {
		http.Error(w, "no conversation id", http.StatusBadRequest)
		return
	}
	n := 0
	for _, msg := range req.Messages {
		if msg.Role == "user" {
			n++
		}
	}
	id := r.Header.Get("X-Request-Id")

	e.mu.Lock()
	gate := e.gate
	if gate != nil {
		e.held = append(e.held, id)
	}
	e.mu.Unlock()
	if gate != nil {
		e.changed.notify()
		<-gate // until killed: this request never gets an answer
		return
	}

	e.mu.Lock()
	e.turns = append(e.turns, turn{conv: m[1], n: n, engine: e.name})
	answer := e.answer
	e.mu.Unlock()
	e.changed.notify()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id":     "chatcmpl-" + id,
		"object": "chat.completion",
		"model":  "test-model",
		"choices": []any{map[string]any{
			"index":         0,
			"finish_reason": "stop",
			"message":       map[string]any{"role": "assistant", "content": reply(m[1], n, answer)},
		}},
		"usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
	})
}

// reply is the assistant's answer to turn n of conversation conv, of
// size words (0: 30, the same each turn; else different each turn).
func reply(conv string, n, size int) string {
	if size == 0 {
		return fmt.Sprintf("answer %d of %s: %s", n, conv, words("a"+conv, 30))
	}
	return fmt.Sprintf("answer %d of %s: %s", n, conv, words(fmt.Sprintf("a%s-%d", conv, n), size))
}

// hold makes chat requests wait unanswered until kill.
func (e *engine) hold() {
	e.mu.Lock()
	e.gate = make(chan struct{})
	e.mu.Unlock()
}

// kill closes the listener and every connection at once, as a process
// that dies does, and returns the IDs of the requests it held.
func (e *engine) kill() {
	e.mu.Lock()
	srv, gate := e.srv, e.gate
	e.srv, e.gate = nil, nil
	e.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	if gate != nil {
		close(gate)
	}
}

// revive listens on the engine's old address again.
func (e *engine) revive(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		t.Fatalf("listening on %s again: %v", e.addr, err)
	}
	e.serve(ln)
}

func (e *engine) heldIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.held)
}

func (e *engine) health() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.healthOK
}

func (e *engine) answered() []turn {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.turns)
}

// signal is a broadcast: wait returns a channel that the next notify
// closes.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// waitFor waits until cond holds, re-checking it whenever sig fires, or
// fails the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, sig *signal, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ch := sig.wait()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

// poll checks cond every 50 ms until it holds, or fails the test after
// timeout: for state inside Caddy that nothing signals, such as health.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// readExample returns Caddyfile.example.
func readExample(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// runExample runs src, Caddyfile.example or an edit of it, as its comments
// say to run it, in front of the engines at addrs: bound to 127.0.0.1, on
// a free port. It returns the site's base URL, its port and the admin
// API's base URL.
func runExample(t *testing.T, src []byte, addrs []string) (url, port, admin string) {
	t.Helper()
	_, port, _ = net.SplitHostPort(freeAddr(t))
	admin = runCaddyfile(t, src, map[string]string{
		"UPSTREAMS": strings.Join(addrs, " "),
		"LISTEN":    ":" + port,
		"BIND":      "127.0.0.1",
	})
	return "http://127.0.0.1:" + port, port, admin
}

// runCaddyfile runs a Caddyfile in this process, adapted as `caddy run`
// adapts it, with env as its environment. What `caddy run` takes from the
// environment besides the {$NAME} placeholders goes to the test's own
// places: the admin listener (CADDY_ADMIN) to a free loopback port, which
// it returns as a base URL, the autosaved config and the storage (the
// XDG folders) to temp dirs.
func runCaddyfile(t *testing.T, src []byte, env map[string]string) (admin string) {
	t.Helper()
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	adminAddr := freeAddr(t)
	oldAdmin, oldAutosave, oldStorage := caddy.DefaultAdminListen, caddy.ConfigAutosavePath, caddy.DefaultStorage.Path
	caddy.DefaultAdminListen = adminAddr
	caddy.ConfigAutosavePath = filepath.Join(t.TempDir(), "autosave.json")
	caddy.DefaultStorage.Path = t.TempDir()
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading: %v\n%s", err, cfg)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping Caddy: %v", err)
		}
		caddy.DefaultAdminListen, caddy.ConfigAutosavePath, caddy.DefaultStorage.Path = oldAdmin, oldAutosave, oldStorage
	})
	return "http://" + adminAddr
}

// upstream is what the prefix_cache policy's stats say of one upstream.
type upstream struct {
	Dial          string `json:"dial"`
	Available     bool   `json:"available"` // healthy by active and passive checks
	InFlight      int    `json:"in_flight"`
	InFlightBytes int64  `json:"in_flight_bytes"`
}

// upstreams returns what the admin API's /prefix_cache/stats says of
// every upstream of every prefix_cache instance.
func upstreams(t *testing.T, admin string) []upstream {
	t.Helper()
	resp, err := http.Get(admin + "/prefix_cache/stats")
	if err != nil {
		t.Fatalf("GET /prefix_cache/stats: %v", err)
	}
	defer resp.Body.Close()
	var stats struct {
		Instances []struct {
			Upstreams []upstream `json:"upstreams"`
		} `json:"instances"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		t.Fatalf("decoding stats: %v", err)
	}
	var out []upstream
	for _, in := range stats.Instances {
		out = append(out, in.Upstreams...)
	}
	return out
}

// available reports, per upstream, whether the prefix_cache policy sees
// it available (healthy by active and passive checks).
func available(t *testing.T, admin string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, u := range upstreams(t, admin) {
		out[u.Dial] = u.Available
	}
	return out
}

// settled waits until the edge has settled every request: none in
// flight at any upstream, none of their routing text counted. A client
// has its whole answer before Caddy's handler returns and the policy
// settles the request, so a client's next request can find the last one
// still counted, its prefill queued in front of it.
func settled(t *testing.T, admin string) {
	t.Helper()
	poll(t, 30*time.Second, "every request settled", func() bool {
		for _, u := range upstreams(t, admin) {
			if u.InFlight != 0 || u.InFlightBytes != 0 {
				return false
			}
		}
		return true
	})
}

// words returns n deterministic words distinct per seed.
func words(seed string, n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "%s-%d ", seed, i)
	}
	return sb.String()
}

// conversation is a multi-turn chat of one client: each turn sends the
// whole history, as chat clients do.
type conversation struct {
	id, key string
	msgs    []map[string]string
}

func newConversation(i int) *conversation {
	id := fmt.Sprintf("c%02d", i)
	return &conversation{
		id:  id,
		key: fmt.Sprintf("Bearer key-%d", i%3),
		msgs: []map[string]string{{
			"role":    "system",
			"content": fmt.Sprintf("conversation %s. You are a helpful assistant. %s", id, words("sys"+id, 120)),
		}},
	}
}

// outcome is what the client saw of one request.
type outcome struct {
	conv, reqID string
	err         error
	header      http.Header
}

var requestSeq struct {
	sync.Mutex
	n int
}

func nextRequestID() string {
	requestSeq.Lock()
	defer requestSeq.Unlock()
	requestSeq.n++
	return fmt.Sprint(requestSeq.n)
}

// turn sends the conversation's next user message, and on an error sends
// it again, as OpenAI's SDKs do (two retries), until one answer comes
// back. It returns every attempt.
func (c *conversation) turn(client *http.Client, url string) []outcome {
	c.msgs = append(c.msgs, map[string]string{"role": "user", "content": fmt.Sprintf("question %d: %s", len(c.msgs)/2+1, words("q"+c.id, 60))})
	var out []outcome
	for range 3 {
		o := c.send(client, url)
		out = append(out, o)
		if o.err == nil {
			return out
		}
	}
	return out
}

func (c *conversation) send(client *http.Client, url string) outcome {
	o := outcome{conv: c.id, reqID: nextRequestID()}
	body, _ := json.Marshal(map[string]any{"model": "test-model", "messages": c.msgs, "max_tokens": 64})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", c.key)
	req.Header.Set("X-Request-Id", o.reqID)
	resp, err := client.Do(req)
	if err != nil {
		o.err = err
		return o
	}
	defer resp.Body.Close()
	o.header = resp.Header
	var answer struct {
		Choices []struct {
			Message map[string]string `json:"message"`
		} `json:"choices"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		o.err = fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(raw))
		return o
	}
	if err := json.Unmarshal(raw, &answer); err != nil || len(answer.Choices) == 0 {
		o.err = fmt.Errorf("bad answer %q: %v", raw, err)
		return o
	}
	c.msgs = append(c.msgs, answer.Choices[0].Message)
	return o
}

// runTurns has every conversation take n turns, the conversations
// concurrently, and returns every request's outcome.
func runTurns(client *http.Client, url string, convs []*conversation, n int) []outcome {
	var (
		mu  sync.Mutex
		out []outcome
		wg  sync.WaitGroup
	)
	for _, c := range convs {
		wg.Go(func() {
			for range n {
				o := c.turn(client, url)
				mu.Lock()
				out = append(out, o...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// takeTurns has every conversation take n turns, one request at a time:
// each conversation's turn k, one after another, then each one's turn
// k+1, each request sent once the edge behind admin has settled the one
// before (settled). No request waits behind another, so the choice sees
// no queue, and a conversation whose home is up stays there. The cost
// moves a turn off a holder whose queue outweighs its cached prefix
// (caddymodule's TestCostMovesAWarmConversationOffALongQueue);
// concurrent turns on these instant engines would build such queues by
// chance, and these tests are about failover, not that trade.
func takeTurns(t *testing.T, client *http.Client, url, admin string, convs []*conversation, n int) []outcome {
	t.Helper()
	var out []outcome
	for range n {
		for _, c := range convs {
			out = append(out, c.turn(client, url)...)
			settled(t, admin)
		}
	}
	return out
}

// homes maps each conversation to the engines that answered its turns
// from turn `from` on, in turn order.
func homes(engines []*engine, from int) map[string][]string {
	var all []turn
	for _, e := range engines {
		all = append(all, e.answered()...)
	}
	slices.SortStableFunc(all, func(a, b turn) int { return a.n - b.n })
	out := map[string][]string{}
	for _, tr := range all {
		if tr.n >= from {
			out[tr.conv] = append(out[tr.conv], tr.engine)
		}
	}
	return out
}

func oneHome(engines []string) (string, bool) {
	if len(engines) == 0 {
		return "", false
	}
	for _, e := range engines {
		if e != engines[0] {
			return "", false
		}
	}
	return engines[0], true
}

// TestFailover runs Caddyfile.example as shipped, its addresses given
// through its environment variables, in front of four engines with
// twelve conversations, kills the engine holding the most conversations
// while each of them has a request in flight there, and brings it back.
// Only the requests in flight at the kill may fail; the dead engine's
// conversations each move to one new home and stay there, the others
// never move; once the engine answers /health again and its failures
// have aged out, Caddy routes to it again.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the policy's hold on an engine it could not reach (10 s)")
	}
	var engines []*engine
	var addrs []string
	byName := map[string]*engine{}
	for i := range 4 {
		e := startEngine(t, fmt.Sprintf("e%d", i))
		engines = append(engines, e)
		addrs = append(addrs, e.addr)
		byName[e.name] = e
	}
	url, port, admin := runExample(t, readExample(t), addrs)

	// BIND=127.0.0.1 binds that address only, as the comment says.
	if c, err := net.Dial("tcp", "127.0.0.2:"+port); err == nil {
		c.Close()
		t.Errorf("BIND=127.0.0.1, yet Caddy accepts connections on 127.0.0.2:%s", port)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Logf("dialing 127.0.0.2:%s: %v (want connection refused)", port, err)
	}

	client := &http.Client{Timeout: 30 * time.Second}
	var convs []*conversation
	for i := range 12 {
		convs = append(convs, newConversation(i))
	}

	// Two turns each: the first is placed, the second follows its prefix.
	for _, o := range takeTurns(t, client, url, admin, convs, 2) {
		if o.err != nil {
			t.Fatalf("before the kill: %s request %s: %v", o.conv, o.reqID, o.err)
		}
		for _, h := range []string{"X-Upstream", "X-Prefix-Cache"} {
			if v := o.header.Get(h); v != "" {
				t.Errorf("response carries %s: %s; routing information is for operators only", h, v)
			}
		}
	}
	home := map[string]string{}
	count := map[string]int{}
	for conv, es := range homes(engines, 1) {
		h, ok := oneHome(es)
		if !ok || len(es) != 2 {
			t.Fatalf("before the kill, %s was served by %v, want one engine twice", conv, es)
		}
		home[conv] = h
		count[h]++
	}
	victim := engines[0]
	for _, e := range engines {
		if count[e.name] > count[victim.name] {
			victim = e
		}
	}
	var moving []string
	for conv, h := range home {
		if h == victim.name {
			moving = append(moving, conv)
		}
	}
	t.Logf("homes %v; killing %s (%s), home of %d conversations", count, victim.name, victim.addr, len(moving))

	// Mid-run: every conversation goes on for six turns; the victim's
	// conversations find their third turn held there, and then the
	// victim dies with exactly those requests in flight. The third turns
	// run at once; the five after them one request at a time.
	victim.hold()
	done := make(chan []outcome)
	go func() { done <- runTurns(client, url, convs, 1) }()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d requests in flight at %s", len(moving), victim.name), &victim.changed, func() bool {
		return len(victim.heldIDs()) >= len(moving)
	})
	inFlight := victim.heldIDs()
	victim.kill()
	outcomes := <-done
	outcomes = append(outcomes, takeTurns(t, client, url, admin, convs, 5)...)

	var failed []string
	for _, o := range outcomes {
		if o.err == nil {
			continue
		}
		failed = append(failed, o.reqID)
		if !slices.Contains(inFlight, o.reqID) {
			t.Errorf("%s request %s failed though it was not in flight at the dead engine: %v", o.conv, o.reqID, o.err)
		}
	}
	t.Logf("%d requests in flight at the kill, %d failed, of %d", len(inFlight), len(failed), len(outcomes))
	newHome := map[string]string{}
	for conv, es := range homes(engines, 3) {
		h, ok := oneHome(es)
		switch {
		case len(es) != 6:
			t.Errorf("%s: %d of its 6 turns after the kill were answered (%v)", conv, len(es), es)
		case !ok:
			t.Errorf("%s moved between %v after the kill; want one new home", conv, es)
		case slices.Contains(moving, conv) && h == victim.name:
			t.Errorf("%s was answered by the dead engine", conv)
		case !slices.Contains(moving, conv) && h != home[conv]:
			t.Errorf("%s moved from %s to %s though its engine lived", conv, home[conv], h)
		}
		newHome[conv] = h
	}

	// Back: the engine listens again; Caddy's active check finds /health
	// answering, and the engine is available again.
	probes := victim.health()
	victim.revive(t)
	waitFor(t, 30*time.Second, "a /health probe of the revived engine", &victim.changed, func() bool {
		return victim.health() > probes
	})
	poll(t, 60*time.Second, victim.addr+" available again", func() bool {
		return available(t, admin)[victim.addr]
	})

	// The moved conversations stay on their new homes: the revived
	// engine holds only shorter prefixes of them.
	for _, o := range takeTurns(t, client, url, admin, convs, 2) {
		if o.err != nil {
			t.Errorf("after the revival: %s request %s: %v", o.conv, o.reqID, o.err)
		}
	}
	for conv, es := range homes(engines, 9) {
		if h, ok := oneHome(es); !ok || h != newHome[conv] {
			t.Errorf("after the revival, %s went to %v, want %s", conv, es, newHome[conv])
		}
	}

	// And new conversations land on the revived engine again, once the
	// policy's hold on an engine requests could not reach has passed
	// (caddymodule.DialFailureHold, 10 s): a new conversation every 50 ms
	// until one does.
	before := len(victim.answered())
	i := 100
	poll(t, caddymodule.DialFailureHold+20*time.Second, "a new conversation placed on the revived "+victim.name, func() bool {
		i++
		for _, o := range runTurns(client, url, []*conversation{newConversation(i)}, 1) {
			if o.err != nil {
				t.Errorf("new conversation %s: %v", o.conv, o.err)
			}
		}
		return len(victim.answered()) > before
	})
}
