package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// When can Caddy ask for a request's body again? Read from
// modules/caddyhttp/reverseproxy (v2.11.9: ServeHTTP, proxyLoopIteration,
// reverseProxy, tryAgain):
//
//   - After a dial error, Caddy retries (lb_retries / lb_try_duration) and
//     calls Select again. Nothing was read: the transport dials before it
//     writes, and Caddy's own wrapper keeps the body open. The replay body
//     starts over as it is.
//   - When Select returns no upstream, likewise: nothing was read.
//   - After the transport has read from the body, a POST is retried only if
//     lb_retry_match is configured: on a response its matchers match
//     (retryableResponseError: the whole body was sent and the response
//     headers arrived), or on a transport error its request matchers match.
//     Without lb_retry_match, tryAgain returns false for any error that is
//     not a dial error, so once the transport has read the body, nothing
//     will read it again.
//   - With request_buffers covering the whole body, Caddy holds the body
//     itself and hands each attempt a fresh reader of its own buffer: the
//     policy's copy is needed only until the first attempt's transport has
//     read it.
//   - handle_response routes run with the original request, whose body the
//     first round trip consumed, as in stock Caddy; the policy does not
//     replay it there.
//
// So a buffer is kept after the transport took the body (and a retry
// rewinds the replay to the start) only when the handler has retries and
// lb_retry_match, and does not buffer the whole body itself. Otherwise it
// goes back to its pool as soon as the transport has read it (for an
// ordinary streaming response: when the engine has read the prompt, while
// the tokens stream), or when the request ends, whichever comes first.

// handlerReuse is what the reverse_proxy handler above the policy says
// about body reuse, read from its configuration at Provision.
type handlerReuse struct {
	known          bool  // the policy was provisioned under a reverse_proxy handler
	retryAfterRead bool  // retries with lb_retry_match: a sent body may be asked for again
	requestBuffers int64 // request_buffers: Caddy holds bodies up to this size itself (-1: any)
}

// handlerReuseOf reads the retry and buffering options of h, the
// nearest reverse_proxy handler above the policy (nil: none). The
// handler's lb_retry_match is still raw JSON at this point: Caddy
// provisions the selection policy first.
func handlerReuseOf(h *reverseproxy.Handler) handlerReuse {
	if h == nil {
		return handlerReuse{}
	}
	hr := handlerReuse{known: true, requestBuffers: h.RequestBuffers}
	if lb := h.LoadBalancing; lb != nil {
		retries := lb.Retries > 0 || lb.TryDuration > 0
		hr.retryAfterRead = retries && (len(lb.RetryMatchRaw) > 0 || len(lb.RetryMatch) > 0)
	}
	return hr
}

// keepBody reports whether r's body must be kept after the transport has
// read it, because a retry may ask for it again. Unknown handlers (the
// policy outside reverse_proxy) keep it until the request ends.
func (s *PrefixCacheSelection) keepBody(r *http.Request) bool {
	hr := s.reuse
	if !hr.known {
		return true
	}
	if !hr.retryAfterRead {
		return false
	}
	// Caddy buffered the whole body (prepareRequest sets ContentLength
	// to what it read when the body fit under request_buffers) and
	// replays its own buffer on every attempt.
	switch {
	case hr.requestBuffers < 0:
		return false
	case hr.requestBuffers > 0 && r.ContentLength >= 0 && r.ContentLength < hr.requestBuffers:
		return false
	}
	return true
}
