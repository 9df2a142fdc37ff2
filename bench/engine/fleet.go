package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Fleet is a set of engines, each served by its own HTTP server.
type Fleet struct {
	engines []*Engine
	servers []*http.Server
	addrs   []string
	wg      sync.WaitGroup
}

// StartFleet starts n engines with the same configuration, each on its own
// ephemeral port of 127.0.0.1.
func StartFleet(n int, cfg Config) (*Fleet, error) {
	if n < 1 {
		return nil, fmt.Errorf("fleet size must be at least 1, got %d", n)
	}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = "127.0.0.1:0"
	}
	return StartFleetAt(addrs, cfg)
}

// StartFleetAt starts one engine per listen address ("host:port"; port 0
// picks a free one). On error, the engines already started are closed.
func StartFleetAt(addrs []string, cfg Config) (*Fleet, error) {
	if len(addrs) == 0 {
		return nil, errors.New("fleet needs at least one address")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f := &Fleet{}
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("starting engine on %s: %w", addr, err)
		}
		e, err := New(cfg)
		if err != nil {
			ln.Close()
			f.Close()
			return nil, err
		}
		srv := &http.Server{Handler: e}
		f.engines = append(f.engines, e)
		f.servers = append(f.servers, srv)
		f.addrs = append(f.addrs, ln.Addr().String())
		f.wg.Go(func() { srv.Serve(ln) })
	}
	return f, nil
}

// Addrs returns the engines' addresses as "127.0.0.1:port", in the order of
// [Fleet.Engines]: the dial addresses of reverse_proxy upstreams.
func (f *Fleet) Addrs() []string { return append([]string(nil), f.addrs...) }

// Engines returns the engines, for their [Engine.Stats].
func (f *Fleet) Engines() []*Engine { return append([]*Engine(nil), f.engines...) }

// Stats returns every engine's statistics, in the order of [Fleet.Engines].
func (f *Fleet) Stats() []Stats {
	s := make([]Stats, len(f.engines))
	for i, e := range f.engines {
		s[i] = e.Stats()
	}
	return s
}

// Close stops the engines, which ends the requests in progress, then shuts
// their servers down, waiting up to 5 s for handlers to return before
// closing connections, and waits for the servers to exit.
func (f *Fleet) Close() {
	for _, e := range f.engines {
		e.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range f.servers {
		if s.Shutdown(ctx) != nil {
			s.Close()
		}
	}
	f.wg.Wait()
}
