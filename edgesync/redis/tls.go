package redis

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/caddyserver/caddy/v2"
	"github.com/zeebo/xxh3"
)

// TLS is how a rediss:// connection verifies the server and presents
// itself, for a Redis whose certificate the system does not trust (a
// private CA) or that requires client certificates (tls-auth-clients).
// Its field names follow the TLS options of Caddy's HTTP transport.
type TLS struct {
	// PEM files of the CAs that sign the server's certificate, trusted
	// instead of the system's roots.
	RootCAPEMFiles []string `json:"root_ca_pem_files,omitempty"`

	// PEM files of a client certificate and its key, presented to the
	// server.
	ClientCertificateFile    string `json:"client_certificate_file,omitempty"`
	ClientCertificateKeyFile string `json:"client_certificate_key_file,omitempty"`

	// Name the server's certificate is verified against, when it is not
	// the URL's host (a Redis reached by IP address, or through a tunnel).
	ServerName string `json:"server_name,omitempty"`
}

// config returns base (go-redis's TLS config for a rediss:// URL) with
// these settings applied, and a digest of what it loaded: the files'
// contents are part of what keeps a connection across reloads, so a
// reload after a certificate was rotated in place reconnects with the new
// one. Placeholders in the paths and the name are replaced.
func (t *TLS) config(base *tls.Config) (*tls.Config, uint64, error) {
	repl := caddy.NewReplacer()
	cfg := base.Clone()
	h := xxh3.New()
	read := func(what, path string) ([]byte, error) {
		path, err := repl.ReplaceOrErr(path, true, false)
		if err != nil {
			return nil, fmt.Errorf("tls %s: %w", what, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("tls %s: %w", what, err)
		}
		h.Write(b)
		return b, nil
	}
	if len(t.RootCAPEMFiles) > 0 {
		pool := x509.NewCertPool()
		for _, f := range t.RootCAPEMFiles {
			pem, err := read("root CA", f)
			if err != nil {
				return nil, 0, err
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, 0, fmt.Errorf("tls root CA %s: no PEM certificate in it", f)
			}
		}
		cfg.RootCAs = pool
	}
	switch {
	case t.ClientCertificateFile != "" && t.ClientCertificateKeyFile != "":
		cert, err := read("client certificate", t.ClientCertificateFile)
		if err != nil {
			return nil, 0, err
		}
		key, err := read("client key", t.ClientCertificateKeyFile)
		if err != nil {
			return nil, 0, err
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, 0, fmt.Errorf("tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case t.ClientCertificateFile != "" || t.ClientCertificateKeyFile != "":
		return nil, 0, errors.New("tls client certificate and key go together")
	}
	if t.ServerName != "" {
		name, err := repl.ReplaceOrErr(t.ServerName, true, false)
		if err != nil {
			return nil, 0, fmt.Errorf("tls server_name: %w", err)
		}
		cfg.ServerName = name
		h.WriteString(name)
	}
	return cfg, h.Sum64(), nil
}
