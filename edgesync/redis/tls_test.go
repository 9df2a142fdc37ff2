package redis

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/caddyserver/caddy/v2"
)

// TestTLS: a rediss:// URL speaks TLS to a server whose certificate a
// private CA signed for another name than the URL's host, and which
// requires a client certificate; the tls settings make it connect, and
// each of them is needed: without the CA, without the client
// certificate, without the server name, or over plain TCP, the edge never
// connects (and routes alone, as with Redis down).
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	serverCert := ca.issue(t, "redis.internal", false)
	clientCert := ca.issue(t, "edge-1", true)
	caFile := writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.cert.Raw)
	clientFile := writePEM(t, dir, "edge.pem", "CERTIFICATE", clientCert.Certificate[0])
	keyDER, err := x509.MarshalPKCS8PrivateKey(clientCert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := writePEM(t, dir, "edge-key.pem", "PRIVATE KEY", keyDER)

	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	m := miniredis.NewMiniRedis()
	if err := m.StartTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	url := "rediss://" + m.Addr() + "/0"
	full := TLS{RootCAPEMFiles: []string{caFile}, ClientCertificateFile: clientFile, ClientCertificateKeyFile: keyFile, ServerName: "redis.internal"}
	with := func(c TLS) func(*Transport) {
		return func(tr *Transport) { tr.TLS = &c }
	}

	a := newTransport(t, "a", url, with(full))
	b := newTransport(t, "b", url, with(full))
	in := subscribe(t, b, 16)
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	msg := placement(1, 8)
	a.Publish(msg)
	in.expect(t, msg, deliverWithin)

	noCA, noClient, noName := full, full, full
	noCA.RootCAPEMFiles = nil
	noClient.ClientCertificateFile, noClient.ClientCertificateKeyFile = "", ""
	noName.ServerName = ""
	for _, tt := range []struct {
		name string
		tr   *Transport
		why  string // in the error, if the failure has a reason of its own
	}{
		{"the system's roots", newTransport(t, "no-ca", url, with(noCA), withTimeout(200*time.Millisecond)), "unknown authority"},
		{"no client certificate", newTransport(t, "no-client", url, with(noClient), withTimeout(200*time.Millisecond)), ""},
		{"the URL's host", newTransport(t, "no-name", url, with(noName), withTimeout(200*time.Millisecond)), "127.0.0.1"},
		{"plain TCP", newTransport(t, "plain", "redis://"+m.Addr()+"/0", withTimeout(200*time.Millisecond)), ""},
	} {
		// Until its first attempt has failed, not being connected would
		// prove nothing.
		deadline := time.Now().Add(reconnectWithin)
		for tt.tr.Status().LastError == "" {
			if time.Now().After(deadline) {
				t.Fatalf("with %s: no failed attempt within %v", tt.name, reconnectWithin)
			}
			time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
		}
		st := tt.tr.Status()
		if st.Connected {
			t.Errorf("with %s: connected to a server that should refuse it", tt.name)
		}
		if !strings.Contains(st.LastError, tt.why) {
			t.Errorf("with %s: last error %q, want it to say %q", tt.name, st.LastError, tt.why)
		}
		if tt.tr.Publish(msg) {
			t.Errorf("with %s: Publish = true while not connected", tt.name)
		}
		t.Logf("with %s: %s", tt.name, st.LastError)
	}
}

// The tls settings are checked when the config loads: they need a
// rediss:// URL, files that exist and hold PEM, and a certificate with its
// key.
func TestTLSRefusedAtProvision(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		url  string
		tls  TLS
		want string
	}{
		{"redis://127.0.0.1:1/0", TLS{ServerName: "x"}, "need a rediss:// url"},
		{"rediss://127.0.0.1:1/0", TLS{RootCAPEMFiles: []string{filepath.Join(dir, "missing.pem")}}, "no such file"},
		{"rediss://127.0.0.1:1/0", TLS{RootCAPEMFiles: []string{notPEM}}, "no PEM certificate"},
		{"rediss://127.0.0.1:1/0", TLS{ClientCertificateFile: notPEM}, "go together"},
		{"rediss://127.0.0.1:1/0", TLS{ClientCertificateFile: notPEM, ClientCertificateKeyFile: notPEM}, "client certificate"},
	} {
		tr := &Transport{URL: tt.url, TLS: &tt.tls}
		ctx, cancel := caddy.NewContext(caddy.Context{Context: t.Context()})
		err := tr.Provision(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Provision(%s, %+v) = %v, want an error containing %q", tt.url, tt.tls, err, tt.want)
		}
		_ = tr.Cleanup()
	}
}

// testCA is a private certificate authority for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert, key}
}

// issue returns a certificate the CA signed for name, for a client or a
// server.
func (ca *testCA) issue(t *testing.T, name string, client bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
