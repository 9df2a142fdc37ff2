package redis

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// UnmarshalCaddyfile sets up the transport from Caddyfile tokens, starting
// at the module's name as Caddy's nested modules do. Syntax, inside
// lb_policy prefix_cache { }:
//
//	sync redis [<url>] {
//		url          <url>
//		channel      <name>
//		buffer       <messages>
//		dial_timeout <duration>
//		timeout      <duration>
//		tls_trusted_ca_certs <pem_files...>
//		tls_client_auth      <cert_file> <key_file>
//		tls_server_name      <server_name>
//	}
//
// The URL is given once, on the line or in the block:
// redis://[[user]:password@]host[:port][/db], or rediss:// for TLS; it
// may be a placeholder such as {env.REDIS_URL}. The tls_ options, named
// as those of Caddy's HTTP transport, need a rediss:// URL.
func (t *Transport) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume module name
	if d.NextArg() {
		t.URL = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "url":
			if t.URL != "" {
				return d.Err("url already specified")
			}
			if !d.NextArg() {
				return d.ArgErr()
			}
			t.URL = d.Val()
		case "channel":
			if !d.NextArg() {
				return d.ArgErr()
			}
			t.Channel = d.Val()
		case "buffer":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil || n < 1 {
				return d.Errf("invalid buffer '%s': must be a positive number of messages", d.Val())
			}
			t.Buffer = n
		case "dial_timeout":
			if err := duration(d, "dial_timeout", &t.DialTimeout); err != nil {
				return err
			}
		case "timeout":
			if err := duration(d, "timeout", &t.Timeout); err != nil {
				return err
			}
		case "tls_trusted_ca_certs":
			files := d.RemainingArgs()
			if len(files) == 0 {
				return d.ArgErr()
			}
			t.tls().RootCAPEMFiles = append(t.tls().RootCAPEMFiles, files...)
		case "tls_client_auth":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("tls_client_auth needs a certificate file and a key file, got %d arguments", len(args))
			}
			t.tls().ClientCertificateFile, t.tls().ClientCertificateKeyFile = args[0], args[1]
		case "tls_server_name":
			if !d.NextArg() {
				return d.ArgErr()
			}
			t.tls().ServerName = d.Val()
		default:
			return d.Errf("unrecognized subdirective '%s'", d.Val())
		}
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	if t.URL == "" {
		return d.Err("missing url: sync redis redis://HOST:PORT[/DB]")
	}
	return nil
}

// duration parses one positive duration argument into dst.
func duration(d *caddyfile.Dispenser, name string, dst *caddy.Duration) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	v, err := caddy.ParseDuration(d.Val())
	if err != nil {
		return d.Errf("invalid %s '%s': %v", name, d.Val(), err)
	}
	if v <= 0 {
		return d.Errf("invalid %s '%s': must be positive", name, d.Val())
	}
	*dst = caddy.Duration(v)
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Transport)(nil)

// tls returns the transport's TLS settings, creating them.
func (t *Transport) tls() *TLS {
	if t.TLS == nil {
		t.TLS = new(TLS)
	}
	return t.TLS
}
