package caddymodule_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// dnsServer answers A queries for one name from a list the test changes.
type dnsServer struct {
	mu      sync.Mutex
	ips     []net.IP
	queries int
	addr    string
}

func startDNS(t *testing.T, ips ...net.IP) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsServer{ips: ips, addr: pc.LocalAddr().String()}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(d.serve)}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return d
}

func (d *dnsServer) serve(w dns.ResponseWriter, q *dns.Msg) {
	d.mu.Lock()
	ips := append([]net.IP(nil), d.ips...)
	d.queries++
	d.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(q)
	for _, question := range q.Question {
		if question.Qtype != dns.TypeA {
			continue
		}
		for _, ip := range ips {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1},
				A:   ip,
			})
		}
	}
	w.WriteMsg(m)
}

// set changes the answer and returns the query count before the change.
func (d *dnsServer) set(ips ...net.IP) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ips = ips
	return d.queries
}

func (d *dnsServer) queryCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queries
}

// backendsOnIPs starts one backend per loopback address, all on one port,
// as `dynamic a` needs.
func backendsOnIPs(t *testing.T, ips []net.IP) ([]*backend, int) {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		port := freePort(t)
		var bs []*backend
		ok := true
		for i, ip := range ips {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(port)))
			if err != nil {
				ok = false
				break
			}
			b := newBackendOn(t, fmt.Sprintf("b%d", i), ln)
			bs = append(bs, b)
		}
		if ok {
			return bs, port
		}
		for _, b := range bs {
			b.srv.Close()
		}
	}
	t.Fatal("no port free on every loopback address")
	return nil, 0
}

// Dynamic upstreams from a DNS source: state is keyed by Dial, so the order
// of the DNS answer does not move prefixes, and an address that leaves the
// answer is forgotten.
func TestDynamicUpstreams(t *testing.T) {
	ips := []net.IP{net.IPv4(127, 0, 0, 2), net.IPv4(127, 0, 0, 3), net.IPv4(127, 0, 0, 4)}
	bs, backendPort := backendsOnIPs(t, ips)
	d := startDNS(t, ips...)
	port := freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy {
		dynamic a {
			name engines.test
			port %d
			refresh 50ms
			resolvers %s
			versions ipv4
		}
		lb_policy prefix_cache {
			forget_after 200ms
		}
	}
}
`, port, backendPort, d.addr))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	system := "You are a helpful assistant."
	homes := map[int]string{}
	for c := range 9 {
		homes[c], _ = post(t, http.DefaultClient, url, chat(system, words(fmt.Sprintf("dyn%d", c), 200)))
	}
	used := map[string]bool{}
	for _, h := range homes {
		used[h] = true
	}
	if len(used) < 2 {
		t.Errorf("9 conversations all went to %v, want them spread over the DNS answer", used)
	}

	// waitForLookup sends requests until Caddy has asked the DNS server
	// again, so the next requests use the new answer.
	waitForLookup := func(before int) {
		deadline := time.Now().Add(10 * time.Second)
		for d.queryCount() <= before {
			if time.Now().After(deadline) {
				t.Fatal("Caddy did not look the name up again")
			}
			resp, err := http.Post(url, "text/plain", nil) // routed by the fallback, not recorded
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}

	// The same addresses in another order: nothing moves.
	waitForLookup(d.set(ips[2], ips[0], ips[1]))
	for c := range 9 {
		got, _ := post(t, http.DefaultClient, url, chat(system, words(fmt.Sprintf("dyn%d", c), 200), "ok", "next"))
		if got != homes[c] {
			t.Errorf("after the DNS answer was reordered, conversation %d went to %s, want %s", c, got, homes[c])
		}
	}

	// An address leaves the answer: its conversations move, nothing fails,
	// and the index forgets it.
	gone := bs[2]
	waitForLookup(d.set(ips[0], ips[1]))
	for c := range 9 {
		got, _ := post(t, http.DefaultClient, url, chat(system, words(fmt.Sprintf("dyn%d", c), 200), "ok", "next", "ok", "more"))
		if got == gone.name {
			t.Errorf("conversation %d went to %s after it left the DNS answer", c, got)
		}
	}
	goneDial := net.JoinHostPort(ips[2].String(), fmt.Sprint(backendPort))
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := getStats(t, admin)
		if _, ok := st.Instances[0].Indexed[goneDial]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still indexed 10s after it left the DNS answer: %v", goneDial, st.Instances[0].Indexed)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}
