package examples_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The commands the README's Operations section and the shipped
// Caddyfiles' comments give are run as written by TestCommands, with a
// caddy binary: CI builds one with the README's xcaddy command and runs
//
//	CADDY_BINARY=$PWD/caddy go test -run TestCommands ./examples
//
// Only addresses change: the documented engines (10.x, in the commands and
// in copies of the Caddyfiles) become local ones, the admin listener
// (localhost:2019, CADDY_ADMIN) and the site (LISTEN) free loopback
// ports, HOME a temp dir.

// docAddrs are the engine addresses the documentation uses.
const docAddrs = "10.0.0.11:8000 10.0.0.12:8000 10.0.0.13:8000 10.0.0.14:8000"

// shellBlocks returns the ```sh blocks of the README section headed
// "## <section>".
func shellBlocks(t *testing.T, section string) []string {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	i := strings.Index(s, "\n## "+section+"\n")
	if i < 0 {
		t.Fatalf("README has no %q section", section)
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(s, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// commentCommands returns the commands in a Caddyfile's comments: lines
// indented three spaces after "#", continued by a trailing backslash.
func commentCommands(t *testing.T, file string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	cont := false
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "#   ")
		if !ok {
			cont = false
			continue
		}
		line = strings.TrimSpace(line)
		if cont {
			cmds[len(cmds)-1] += "\n" + line
		} else if strings.HasPrefix(line, "caddy ") || strings.HasPrefix(line, "curl ") || strings.HasPrefix(line, "export ") {
			cmds = append(cmds, line)
		} else {
			continue
		}
		cont = strings.HasSuffix(line, `\`)
	}
	return cmds
}

// shell runs documentation commands in a temp working directory that
// holds the shipped Caddyfiles under their documented paths.
type shell struct {
	t     *testing.T
	dir   string
	env   []string
	admin string
	repl  *strings.Replacer
}

func newShell(t *testing.T, binary string, engines []string) *shell {
	t.Helper()
	dir := t.TempDir()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// The Caddyfiles, their private addresses (10.x) replaced by local
	// engines: even `caddy validate` starts the active health checks,
	// which would dial them.
	files, _ := filepath.Glob(filepath.Join(root, "examples", "*.Caddyfile"))
	files = append(files, filepath.Join(root, "Caddyfile.example"))
	if err := os.Mkdir(filepath.Join(dir, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		raw = privateAddr.ReplaceAllFunc(raw, func([]byte) []byte {
			i++
			return []byte(engines[i%len(engines)])
		})
		rel, _ := filepath.Rel(root, f)
		if err := os.WriteFile(filepath.Join(dir, rel), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	admin := freeAddr(t)
	_, port, _ := net.SplitHostPort(freeAddr(t))
	home := t.TempDir()
	env := append(os.Environ(),
		"PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home, "XDG_DATA_HOME=", "XDG_CONFIG_HOME=",
		"CADDY_ADMIN="+admin, "LISTEN=:"+port, "BIND=127.0.0.1",
		"UPSTREAMS="+strings.Join(engines, " "),
	)
	return &shell{
		t: t, dir: dir, env: env, admin: admin,
		repl: strings.NewReplacer(docAddrs, strings.Join(engines, " "), "localhost:2019", admin),
	}
}

// privateAddr matches the documentation's engine addresses.
var privateAddr = regexp.MustCompile(`\b10\.\d+\.\d+\.\d+:\d+\b`)

func (sh *shell) command(script string) *exec.Cmd {
	script = sh.repl.Replace(script)
	if privateAddr.MatchString(script) {
		sh.t.Fatalf("a private address is left in %q: this test dials only loopback", script)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = sh.dir, sh.env
	return cmd
}

// run runs script to the end and returns its output; it fails the test
// unless the script exits 0.
func (sh *shell) run(script string) string {
	sh.t.Helper()
	out, err := sh.command(script).CombinedOutput()
	if err != nil {
		sh.t.Fatalf("%s\n%v\n%s", script, err, out)
	}
	return string(out)
}

// start starts a script that ends in `caddy run`, waits until Caddy's
// admin API answers, and stops Caddy when the test ends.
func (sh *shell) start(script string) {
	sh.t.Helper()
	cmd := sh.command(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		sh.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sh.t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for {
		resp, err := http.Get("http://" + sh.admin + "/config/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-exited:
			sh.t.Fatalf("%s\nexited: %v\n%s", script, err, out.String())
		case <-deadline:
			sh.t.Fatalf("%s\nadmin API not answering after 60 s\n%s", script, out.String())
		case <-tick.C:
		}
	}
}

// chatThrough sends one chat request to the site at base and fails the
// test unless an engine answers it.
func chatThrough(t *testing.T, client *http.Client, base string) {
	t.Helper()
	if o := newConversation(0).send(client, base); o.err != nil {
		t.Fatalf("chat request through %s: %v", base, o.err)
	}
}

func TestCommands(t *testing.T) {
	binary := os.Getenv("CADDY_BINARY")
	if binary == "" {
		t.Skip("set CADDY_BINARY to a caddy built with this module (CI does)")
	}
	binary, err := filepath.Abs(binary)
	if err != nil {
		t.Fatal(err)
	}
	var engines []string
	for i := range 4 {
		engines = append(engines, startEngine(t, fmt.Sprintf("e%d", i)).addr)
	}
	client := &http.Client{Timeout: 30 * time.Second}

	t.Run("README Operations", func(t *testing.T) {
		blocks := shellBlocks(t, "Operations")
		if len(blocks) != 3 {
			t.Fatalf("README Operations has %d sh blocks, want 3 (run, reload, dry_run)", len(blocks))
		}
		sh := newShell(t, binary, engines)
		sh.start(blocks[0])
		site := "http://127.0.0.1:" + strings.TrimPrefix(envOf(sh.env, "LISTEN"), ":")
		chatThrough(t, client, site)
		sh.run(blocks[1])
		chatThrough(t, client, site)
		if out := sh.run(blocks[2]); !strings.Contains(out, `"routed": true`) {
			t.Errorf("dry_run as documented did not route the request:\n%s", out)
		}
	})

	t.Run("Caddyfile.example", func(t *testing.T) {
		cmds := commentCommands(t, "../Caddyfile.example")
		if len(cmds) != 2 {
			t.Fatalf("Caddyfile.example's comment has commands %q, want export and caddy run", cmds)
		}
		sh := newShell(t, binary, engines)
		sh.start(strings.Join(cmds, "\n"))
		chatThrough(t, client, "http://127.0.0.1:"+strings.TrimPrefix(envOf(sh.env, "LISTEN"), ":"))
	})

	files, _ := filepath.Glob("*.Caddyfile")
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			sh := newShell(t, binary, engines)
			for _, c := range commentCommands(t, f) {
				switch {
				case strings.HasPrefix(c, "export ") && strings.HasSuffix(c, "=..."):
					// A secret the operator supplies: any value will do,
					// of 16 bytes or more (hash_key's least).
					name := strings.TrimSuffix(strings.TrimPrefix(c, "export "), "=...")
					sh.env = append(sh.env, name+"=test-secret-of-32-bytes-for-all")
				case strings.HasPrefix(c, "caddy validate "):
					sh.run(c)
				case strings.HasPrefix(c, "caddy run ") && f == "local-tls.Caddyfile":
					sh.start(c)
					// Caddy's CA issues the site's certificate in the
					// background, after the admin API is up.
					poll(t, 60*time.Second, "a certificate on localhost:8443", func() bool {
						conn, err := tls.Dial("tcp", "127.0.0.1:8443", &tls.Config{ServerName: "localhost", InsecureSkipVerify: true})
						if err == nil {
							conn.Close()
						}
						return err == nil
					})
				case strings.HasPrefix(c, "caddy run "):
					t.Logf("not run: %s (needs the domain's DNS and a certificate from an ACME CA)", c)
				case strings.HasPrefix(c, "curl "):
					if out := sh.run(c); !strings.Contains(out, `"object":"list"`) {
						t.Errorf("%s: got %q, want the engines' model list", c, out)
					}
				default:
					t.Errorf("%s: no rule to run %q", f, c)
				}
			}
		})
	}
}

func envOf(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if s, ok := strings.CutPrefix(kv, name+"="); ok {
			v = s
		}
	}
	return v
}
