package driver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/child"
)

// Bounds on a redis-server's life, in wall time.
const (
	// redisStartTimeout bounds the wait for a new redis-server to answer
	// PING; it answers within milliseconds of its exec.
	redisStartTimeout = 10 * time.Second
	// redisStopTimeout is how long redis-server may take to exit after
	// SIGTERM before it is killed.
	redisStopTimeout = 5 * time.Second
	// redisPingTimeout bounds one PING round trip.
	redisPingTimeout = time.Second
)

// Redis is a redis-server child process on a loopback port, with a
// temporary working directory and no persistence, for edges that share
// placements (see Config.Sync). It can be killed and restarted on the same
// port, as a fault.
type Redis struct {
	// Addr is the server's host:port.
	Addr string

	path string // the redis-server binary
	dir  string // its working directory, removed by Stop

	mu      sync.Mutex
	proc    *child.Proc // one life of the server; nil while killed
	unwatch func() bool // ends the watch of the start context
}

// RedisNotFound is the error's text when redis-server is not installed.
const RedisNotFound = "redis-server not found in PATH: install it (Debian, Ubuntu: apt-get install redis-server)"

// StartRedis starts redis-server on a free loopback port and returns once
// it answers PING, or with an error carrying its output. Stop it with
// Stop; it is killed with its parent on Linux (Pdeathsig) and when ctx
// ends.
func StartRedis(ctx context.Context) (*Redis, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New(RedisNotFound)
	}
	dir, err := os.MkdirTemp("", "prefixbench-redis")
	if err != nil {
		return nil, err
	}
	addrs, err := ReservePorts(1)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &Redis{Addr: addrs[0], path: path, dir: dir}
	if err := r.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	unwatch := context.AfterFunc(ctx, func() { r.Stop() })
	r.mu.Lock()
	r.unwatch = unwatch
	r.mu.Unlock()
	return r, nil
}

// URL returns the server's redis:// URL.
func (r *Redis) URL() string { return "redis://" + r.Addr }

// start runs a new redis-server on r.Addr and waits for its PING.
func (r *Redis) start(ctx context.Context) error {
	host, port, _ := net.SplitHostPort(r.Addr)
	p, err := child.Start(context.Background(), child.Spec{
		Name: "redis-server",
		Path: r.path,
		Args: []string{
			"--bind", host, "--port", port,
			"--save", "", "--appendonly", "no", // no persistence: nothing outlives a kill
			"--dir", r.dir,
			"--daemonize", "no", "--logfile", "", "--loglevel", "warning",
		},
		StopSignal:  syscall.SIGTERM,
		StopTimeout: redisStopTimeout,
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	if err := waitPing(ctx, r.Addr, p.Exited(), redisStartTimeout); err != nil {
		p.Kill()
		r.mu.Lock()
		r.proc = nil
		r.mu.Unlock()
		return fmt.Errorf("redis-server on %s: %w%s", r.Addr, err, p.OutputText())
	}
	return nil
}

// Kill kills the server with SIGKILL, as a crash would, and waits until
// it is gone. It does nothing if the server is not running.
func (r *Redis) Kill() error {
	r.mu.Lock()
	p := r.proc
	r.proc = nil
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Kill()
}

// Restart starts a new server on the same address (after Kill) and waits
// for its PING. Redis listens with SO_REUSEADDR, so the connections the
// killed server left in TIME_WAIT do not hold the port.
func (r *Redis) Restart(ctx context.Context) error {
	r.mu.Lock()
	running := r.proc != nil
	r.mu.Unlock()
	if running {
		return errors.New("redis-server is running: Kill it first")
	}
	return r.start(ctx)
}

// Running reports whether a server started by r has not been killed or
// stopped and has not exited.
func (r *Redis) Running() bool {
	r.mu.Lock()
	p := r.proc
	r.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.Exited():
		return false
	default:
		return true
	}
}

// Pid returns the running server's process ID, or 0.
func (r *Redis) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return 0
	}
	return r.proc.Pid()
}

// Stop ends the server (SIGTERM, then SIGKILL after redisStopTimeout) and
// removes its directory. It returns an error, with the server's output,
// if the server had exited on its own. Stop is idempotent.
func (r *Redis) Stop() error {
	r.mu.Lock()
	if r.unwatch != nil {
		r.unwatch()
	}
	p := r.proc
	r.proc = nil
	dir := r.dir
	r.dir = ""
	r.mu.Unlock()
	var err error
	if p != nil {
		err = p.Stop()
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
	return err
}

// waitPing waits until the server at addr answers a PING, its process
// exits, ctx ends or timeout passes.
func waitPing(ctx context.Context, addr string, exited <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := Ping(ctx, addr)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited before it answered PING")
		case <-ctx.Done():
			return fmt.Errorf("no answer to PING within %v: %w", timeout, err)
		case <-tick.C:
		}
	}
}

// Ping sends one RESP PING to the server at addr and checks that it
// answers +PONG.
func Ping(ctx context.Context, addr string) error {
	return roundTrip(ctx, addr, func(br *bufio.Reader) error {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if line = strings.TrimRight(line, "\r\n"); line != "+PONG" {
			return fmt.Errorf("PING answered %s", strconv.Quote(line))
		}
		return nil
	}, "PING")
}

// roundTrip sends the command args to the server at addr, on a connection
// of its own, and hands the answer to read, all within redisPingTimeout.
func roundTrip(ctx context.Context, addr string, read func(*bufio.Reader) error, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, redisPingTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	cmd := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		cmd = fmt.Appendf(cmd, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write(cmd); err != nil {
		return err
	}
	return read(bufio.NewReader(conn))
}

// Subscribers returns how many connections are subscribed to channel on
// the server at addr (PUBSUB NUMSUB).
func Subscribers(ctx context.Context, addr, channel string) (int, error) {
	n := 0
	err := roundTrip(ctx, addr, func(br *bufio.Reader) error {
		// The answer is an array of the channel's name and its count:
		// *2, $len, the name, :count.
		var lines [4]string
		for i := range lines {
			line, err := br.ReadString('\n')
			if err != nil {
				return err
			}
			lines[i] = strings.TrimRight(line, "\r\n")
		}
		if lines[0] != "*2" || lines[2] != channel || !strings.HasPrefix(lines[3], ":") {
			return fmt.Errorf("PUBSUB NUMSUB answered %q", lines)
		}
		var err error
		n, err = strconv.Atoi(lines[3][1:])
		return err
	}, "PUBSUB", "NUMSUB", channel)
	return n, err
}

// WaitSubscribers waits until at least n connections are subscribed to
// channel on r, so that a replay starts with every edge receiving what
// the others publish, and not with the first placements lost to edges
// still connecting.
func (r *Redis) WaitSubscribers(ctx context.Context, channel string, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	seen := 0
	for {
		got, err := Subscribers(ctx, r.Addr, channel)
		if err == nil {
			if got >= n {
				return nil
			}
			seen = got
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d edges subscribed to %q within %v", seen, n, channel, timeout)
		case <-tick.C:
		}
	}
}

// PublishStats is what a redis-server has received: the bytes of every
// command from every client (total_net_input_bytes) and the PUBLISH
// commands among them.
type PublishStats struct {
	InputBytes int64
	Publishes  int64
}

// Stats reads the server's PublishStats (INFO stats, INFO commandstats).
func (r *Redis) Stats(ctx context.Context) (PublishStats, error) {
	var st PublishStats
	stats, err := info(ctx, r.Addr, "stats")
	if err != nil {
		return st, err
	}
	if st.InputBytes, err = strconv.ParseInt(stats["total_net_input_bytes"], 10, 64); err != nil {
		return st, fmt.Errorf("INFO stats: total_net_input_bytes %q", stats["total_net_input_bytes"])
	}
	cmds, err := info(ctx, r.Addr, "commandstats")
	if err != nil {
		return st, err
	}
	// cmdstat_publish:calls=N,usec=...; absent before the first PUBLISH.
	if v, ok := cmds["cmdstat_publish"]; ok {
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		if st.Publishes, err = strconv.ParseInt(calls, 10, 64); err != nil {
			return st, fmt.Errorf("INFO commandstats: cmdstat_publish %q", v)
		}
	}
	return st, nil
}

// info sends INFO section to the server at addr and returns its fields.
func info(ctx context.Context, addr, section string) (map[string]string, error) {
	fields := map[string]string{}
	err := roundTrip(ctx, addr, func(br *bufio.Reader) error {
		head, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
		if !strings.HasPrefix(head, "$") || err != nil || n < 0 {
			return fmt.Errorf("INFO %s answered %q", section, strings.TrimSpace(head))
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		for _, line := range strings.Split(string(body), "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
				fields[k] = v
			}
		}
		return nil
	}, "INFO", section)
	return fields, err
}
