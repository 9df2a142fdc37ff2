package caddymodule

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/dustin/go-humanize"
)

// UnmarshalCaddyfile sets up the module from Caddyfile tokens. Syntax:
//
//	lb_policy prefix_cache {
//		chunk_size     <bytes>
//		max_chunks     <count>
//		max_entries    <count>
//		max_body       <size>
//		body_budget    <size>
//		load_factor    <factor>
//		load_allowance <requests>
//		load_allowance_bytes <size>|off
//		cold_load_factor <factor>|off
//		prefill_rate   <size>|off
//		choice         cost|rules
//		cache_weight   <weight>
//		min_match      <bytes>
//		min_match_ratio <fraction>
//		tenant         <placeholder>
//		allow_empty_tenant
//		tenant_share   <fraction>
//		hash_key       <secret>
//		forget_after   <duration>
//		fallback       <policy> {
//			<policy options>
//		}
//		sync           <transport> [<args>] {
//			<transport options>
//		}
//		sync_hashes    all|new
//		sync_load      on|off
//		sync_load_interval <duration>
//		engine_metrics [<uri>] {
//			port     <port>
//			interval <duration>
//			timeout  <duration>
//			header   <field> <value>
//			queue    on|off
//			capacity on|off
//			prefill  on|off
//			bytes_per_token <bytes>
//		}
//	}
//
// Sizes take units as Caddy's request_body max_size does (4MiB, 512KB);
// prefill_rate is bytes of routing text per second, with a byte unit
// (64KiB, ~16k tokens/s): a bare "16k" is refused. sync names a module of
// the http.prefix_cache.sync namespace: `sync redis redis://10.0.0.5:6379/0`.
// engine_metrics alone scrapes each upstream's /metrics every second.
func (s *PrefixCacheSelection) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume policy name
	if d.NextArg() {
		return d.ArgErr()
	}

	for d.NextBlock(0) {
		switch d.Val() {
		case "chunk_size":
			if err := positiveInt(d, &s.ChunkSize, maxSize); err != nil {
				return err
			}
		case "max_chunks":
			if err := positiveInt(d, &s.MaxChunks, maxSize); err != nil {
				return err
			}
		case "max_entries":
			if err := positiveInt(d, &s.MaxEntries, maxMaxEntries); err != nil {
				return err
			}
		case "min_match":
			if err := positiveInt(d, &s.MinMatch, maxSize); err != nil {
				return err
			}
		case "min_match_ratio":
			if err := fraction(d, &s.MinMatchRatio); err != nil {
				return err
			}
		case "tenant_share":
			if err := fraction(d, &s.TenantShare); err != nil {
				return err
			}
		case "allow_empty_tenant":
			if d.NextArg() {
				return d.ArgErr()
			}
			s.AllowEmptyTenant = true
		case "max_body", "body_budget":
			name := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			size, err := humanize.ParseBytes(d.Val())
			if err != nil || size == 0 || size > maxSize {
				return d.Errf("invalid %s '%s': must be a size from 1 byte to 1TiB", name, d.Val())
			}
			if name == "max_body" {
				s.MaxBody = int64(size)
			} else {
				s.BodyBudget = int64(size)
			}
			if d.NextArg() {
				return d.ArgErr()
			}
		case "load_factor":
			if !d.NextArg() {
				return d.ArgErr()
			}
			f, err := strconv.ParseFloat(d.Val(), 64)
			if err != nil {
				return d.Errf("invalid load_factor '%s': %v", d.Val(), err)
			}
			if !(f >= 1) || math.IsInf(f, 1) { // also rejects NaN
				return d.Errf("invalid load_factor '%s': must be a finite number of at least 1", d.Val())
			}
			s.LoadFactor = f
			if d.NextArg() {
				return d.ArgErr()
			}
		case "cold_load_factor":
			if !d.NextArg() {
				return d.ArgErr()
			}
			var f float64
			if d.Val() != "off" {
				var err error
				f, err = strconv.ParseFloat(d.Val(), 64)
				if err != nil || !(f >= 1) || math.IsInf(f, 1) {
					return d.Errf("invalid cold_load_factor '%s': must be a number of at least 1, or off", d.Val())
				}
			}
			s.ColdLoadFactor = &f
			if d.NextArg() {
				return d.ArgErr()
			}
		case "load_allowance":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil || n < 0 {
				return d.Errf("invalid load_allowance '%s': must be a whole number of requests, 0 or more", d.Val())
			}
			s.LoadAllowance = &n
			if d.NextArg() {
				return d.ArgErr()
			}
		case "load_allowance_bytes":
			if err := sizeOrOff(d, "a size", &s.LoadAllowanceBytes); err != nil {
				return err
			}
		case "prefill_rate":
			if d.NextArg() {
				if unitless(d.Val()) {
					return d.Errf("invalid prefill_rate '%s': a rate in bytes of routing text per second takes a byte unit (64KiB is ~16k tokens/s at ~4 bytes a token)", d.Val())
				}
				d.Prev()
			}
			if err := sizeOrOff(d, "a size (bytes per second)", &s.PrefillRate); err != nil {
				return err
			}
		case "choice":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if v := d.Val(); v != ChoiceRules && v != ChoiceCost {
				return d.Errf("invalid choice '%s': must be %s or %s", v, ChoiceCost, ChoiceRules)
			}
			s.Choice = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "cache_weight":
			if !d.NextArg() {
				return d.ArgErr()
			}
			w, err := strconv.ParseFloat(d.Val(), 64)
			if err != nil || !(w >= 0) || math.IsInf(w, 1) {
				return d.Errf("invalid cache_weight '%s': must be a finite number of at least 0", d.Val())
			}
			s.CacheWeight = &w
			if d.NextArg() {
				return d.ArgErr()
			}
		case "tenant":
			if !d.NextArg() {
				return d.ArgErr()
			}
			s.Tenant = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "hash_key":
			if !d.NextArg() {
				return d.ArgErr()
			}
			s.HashKey = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "forget_after":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur < time.Duration(MinForgetAfter) || dur > time.Duration(MaxForgetAfter) {
				return d.Errf("invalid forget_after '%s': must be a duration from %v to %v", d.Val(), time.Duration(MinForgetAfter), time.Duration(MaxForgetAfter))
			}
			s.ForgetAfter = caddy.Duration(dur)
			if d.NextArg() {
				return d.ArgErr()
			}
		case "fallback":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if s.FallbackRaw != nil {
				return d.Err("fallback selection policy already specified")
			}
			mod, err := loadFallbackPolicy(d)
			if err != nil {
				return err
			}
			s.FallbackRaw = mod
		case "sync":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if s.SyncRaw != nil {
				return d.Err("sync transport already specified")
			}
			name := d.Val()
			mod, err := caddyfile.UnmarshalModule(d, "http.prefix_cache.sync."+name)
			if err != nil {
				return err
			}
			s.SyncRaw = caddyconfig.JSONModuleObject(mod, "transport", name, nil)
		case "sync_hashes":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if v := d.Val(); v != SyncHashesAll && v != SyncHashesNew {
				return d.Errf("invalid sync_hashes '%s': must be %s or %s", v, SyncHashesAll, SyncHashesNew)
			}
			s.SyncHashes = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "sync_load":
			on, err := onOff(d)
			if err != nil {
				return err
			}
			s.SyncLoad = &on
		case "sync_load_interval":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur < minLoadInterval || dur > maxLoadInterval {
				return d.Errf("invalid sync_load_interval '%s': must be a duration from %v to %v", d.Val(), minLoadInterval, maxLoadInterval)
			}
			s.SyncLoadInterval = caddy.Duration(dur)
			if d.NextArg() {
				return d.ArgErr()
			}
		case "engine_metrics":
			if s.EngineMetrics != nil {
				return d.Err("engine_metrics already specified")
			}
			m, err := unmarshalEngineMetrics(d)
			if err != nil {
				return err
			}
			s.EngineMetrics = m
		default:
			return d.Errf("unrecognized subdirective '%s'", d.Val())
		}
	}
	return nil
}

// unmarshalEngineMetrics reads engine_metrics and its block.
func unmarshalEngineMetrics(d *caddyfile.Dispenser) (*EngineMetrics, error) {
	m := &EngineMetrics{}
	if d.NextArg() {
		m.URI = d.Val()
		if d.NextArg() {
			return nil, d.ArgErr()
		}
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "port":
			if err := positiveInt(d, &m.Port, 65535); err != nil {
				return nil, err
			}
		case "interval", "timeout":
			name := d.Val()
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 {
				return nil, d.Errf("invalid %s '%s': must be a positive duration", name, d.Val())
			}
			if name == "interval" && dur < minMetricsInterval {
				return nil, d.Errf("invalid interval '%s': must be at least %v", d.Val(), minMetricsInterval)
			}
			if name == "interval" {
				m.Interval = caddy.Duration(dur)
			} else {
				m.Timeout = caddy.Duration(dur)
			}
			if d.NextArg() {
				return nil, d.ArgErr()
			}
		case "header":
			var field, value string
			if !d.Args(&field, &value) {
				return nil, d.ArgErr()
			}
			if m.Header == nil {
				m.Header = http.Header{}
			}
			m.Header.Add(field, value)
			if d.NextArg() {
				return nil, d.ArgErr()
			}
		case "queue":
			on, err := onOff(d)
			if err != nil {
				return nil, err
			}
			m.Queue = &on
		case "capacity":
			on, err := onOff(d)
			if err != nil {
				return nil, err
			}
			m.Capacity = on
		case "prefill":
			on, err := onOff(d)
			if err != nil {
				return nil, err
			}
			m.Prefill = on
		case "bytes_per_token":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			f, err := strconv.ParseFloat(d.Val(), 64)
			if err != nil || !(f >= 0.5 && f <= 64) {
				return nil, d.Errf("invalid bytes_per_token '%s': must be a number from 0.5 to 64", d.Val())
			}
			m.BytesPerToken = f
			if d.NextArg() {
				return nil, d.ArgErr()
			}
		default:
			return nil, d.Errf("unrecognized engine_metrics subdirective '%s'", d.Val())
		}
	}
	return m, nil
}

// onOff reads the current subdirective's one argument, on or off.
func onOff(d *caddyfile.Dispenser) (bool, error) {
	name := d.Val()
	if !d.NextArg() {
		return false, d.ArgErr()
	}
	var on bool
	switch d.Val() {
	case "on":
		on = true
	case "off":
	default:
		return false, d.Errf("invalid %s '%s': must be on or off", name, d.Val())
	}
	if d.NextArg() {
		return false, d.ArgErr()
	}
	return on, nil
}

// positiveInt reads the subdirective's single argument, a whole number
// from 1 to atMost, into dst.
func positiveInt(d *caddyfile.Dispenser, dst *int, atMost int) error {
	name := d.Val()
	if !d.NextArg() {
		return d.ArgErr()
	}
	n, err := strconv.Atoi(d.Val())
	if err != nil {
		return d.Errf("invalid %s '%s': %v", name, d.Val(), err)
	}
	if n < 1 || n > atMost {
		return d.Errf("invalid %s '%s': must be from 1 to %d", name, d.Val(), atMost)
	}
	*dst = n
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// fraction reads the one argument of the current directive, a number
// from 0 to 1, into *dst.
func fraction(d *caddyfile.Dispenser, dst **float64) error {
	name := d.Val()
	if !d.NextArg() {
		return d.ArgErr()
	}
	f, err := strconv.ParseFloat(d.Val(), 64)
	if err != nil || !(f >= 0 && f <= 1) {
		return d.Errf("invalid %s '%s': must be a number from 0 to 1", name, d.Val())
	}
	*dst = &f
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// sizeOrOff reads the one argument of the current directive, a size up
// to 1TiB or off (0), into *dst; what names the size in the error.
func sizeOrOff(d *caddyfile.Dispenser, what string, dst **int64) error {
	name := d.Val()
	if !d.NextArg() {
		return d.ArgErr()
	}
	var n int64
	if d.Val() != "off" {
		size, err := humanize.ParseBytes(d.Val())
		if err != nil || size > maxSize {
			return d.Errf("invalid %s '%s': must be %s up to 1TiB, or off", name, d.Val(), what)
		}
		n = int64(size)
	}
	*dst = &n
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// unitless reports whether size is a size with a multiplier but no byte
// unit
// ("16k", "2M"): engines quote prefill in tokens per second, and "16k"
// read as bytes would be a quarter of what its writer meant.
func unitless(size string) bool {
	if _, err := humanize.ParseBytes(size); err != nil {
		return false // not a size at all: sizeOrOff says so
	}
	u := strings.ToLower(strings.TrimSpace(size))
	return !strings.HasSuffix(u, "b") && strings.TrimLeft(u, "0123456789. ") != ""
}

// loadFallbackPolicy reads a selection policy and its options, as Caddy's
// own hash policies read theirs (reverseproxy's unexported helper of the
// same name).
func loadFallbackPolicy(d *caddyfile.Dispenser) (json.RawMessage, error) {
	name := d.Val()
	modID := "http.reverse_proxy.selection_policies." + name
	unm, err := caddyfile.UnmarshalModule(d, modID)
	if err != nil {
		return nil, err
	}
	sel, ok := unm.(reverseproxy.Selector)
	if !ok {
		return nil, d.Errf("module %s (%T) is not a reverseproxy.Selector", modID, unm)
	}
	return caddyconfig.JSONModuleObject(sel, "policy", name, nil), nil
}

// registerUsageDirective registers the prefix_cache_usage directive,
// ordered before reverse_proxy, whose responses it reads.
func registerUsageDirective() {
	httpcaddyfile.RegisterHandlerDirective("prefix_cache_usage", parseUsageHandler)
	httpcaddyfile.RegisterDirectiveOrder("prefix_cache_usage", httpcaddyfile.Before, "reverse_proxy")
}

// UnmarshalCaddyfile sets up the prefix_cache_usage handler. Syntax:
//
//	prefix_cache_usage
//
// It takes no arguments; in a site block it is ordered before
// reverse_proxy.
func (h *UsageHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("unrecognized subdirective '%s'", d.Val())
	}
	return nil
}

func parseUsageHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var u UsageHandler
	err := u.UnmarshalCaddyfile(h.Dispenser)
	return u, err
}

// Interface guards
var _ caddyfile.Unmarshaler = (*PrefixCacheSelection)(nil)
