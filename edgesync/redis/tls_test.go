package redis

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// TestTLS: a rediss:// URL speaks TLS (here to a self-signed server, so
// the URL turns verification off with go-redis's skip_verify option).
func TestTLS(t *testing.T) {
	m := miniredis.NewMiniRedis()
	if err := m.StartTLS(&tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	url := "rediss://" + m.Addr() + "/0?skip_verify=true"
	a := newTransport(t, "a", url)
	b := newTransport(t, "b", url)
	in := subscribe(t, b, 16)
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	msg := placement(1, 8)
	a.Publish(msg)
	in.expect(t, msg, deliverWithin)
	if want := "rediss://" + m.Addr() + "/0"; a.Status().Endpoint != want {
		t.Errorf("Status().Endpoint = %q, want %q", a.Status().Endpoint, want)
	}

	// Plain redis:// to a TLS server never connects.
	plain := newTransport(t, "plain", "redis://"+m.Addr()+"/0", withTimeout(200*time.Millisecond))
	if plain.Publish(msg) {
		t.Error("Publish over plain TCP to a TLS server = true")
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
