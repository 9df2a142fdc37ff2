package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// An attack holds Caddy's memory for a while and lets go when stopped.
type attack struct {
	name string
	// flood is what each engine answer writes as fast as it can (0: a
	// token stream).
	flood int64
	// start opens the attack against site (host:port) and returns a
	// function that ends it.
	start func(site string, n int) (stop func(), err error)
}

// attacks, as the memory and security issues describe them.
var attacks = []attack{
	{"stalled uploads, HTTP/1.1 (declare 4 MiB, send 32 KiB, stall)", 0, stalledH1},
	{"stalled uploads, h2c (one connection, a stream each)", 0, stalledH2C},
	{"trickling uploads (declare 4 MiB, 64 bytes every 100 ms)", 0, trickle},
	{"clients that never read their responses (2 MiB prompts)", 16 << 20, nonReading},
}

const declared = 4 << 20

func stalledH1(site string, n int) (func(), error) {
	var conns []net.Conn
	head := bytes.Repeat([]byte("x"), 32<<10)
	for range n {
		conn, err := net.Dial("tcp", site)
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":\"m\",\"prompt\":\"", declared)
		conn.Write(head)
		conns = append(conns, conn)
	}
	return func() { closeAll(conns) }, nil
}

func stalledH2C(site string, n int) (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	c := h2cClient()
	var wg sync.WaitGroup
	for range n {
		body := io.MultiReader(bytes.NewReader(append([]byte(`{"model":"m","prompt":"`), bytes.Repeat([]byte("x"), 32<<10)...)), blockUntil(ctx))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+site+"/v1/chat/completions", body)
		req.ContentLength = declared
		req.Header.Set("Content-Type", "application/json")
		wg.Go(func() {
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
		c.CloseIdleConnections()
	}, nil
}

// blockUntil is a body that sends nothing until ctx is done.
func blockUntil(ctx context.Context) io.Reader {
	return readerFunc(func([]byte) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func trickle(site string, n int) (func(), error) {
	var conns []net.Conn
	for range n {
		conn, err := net.Dial("tcp", site)
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":\"m\",\"prompt\":\"", declared)
		conns = append(conns, conn)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		drip := bytes.Repeat([]byte("y"), 64)
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				for _, c := range conns {
					c.Write(drip)
				}
			}
		}
	})
	return func() {
		close(stop)
		wg.Wait()
		closeAll(conns)
	}, nil
}

// nonReading sends whole 2 MiB prompts and never reads the answers, which
// the engines write as fast as they can (16 MiB each), so Caddy's writes
// block on full socket buffers.
func nonReading(site string, n int) (func(), error) {
	body := prompts(2<<20, 1)[0]
	var conns []net.Conn
	for range n {
		conn, err := net.Dial("tcp", site)
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetReadBuffer(4 << 10)
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		conn.Write(body)
		conns = append(conns, conn)
	}
	return func() { closeAll(conns) }, nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}
