package dialect

import "mime"

// JSONMediaType reports whether a body sent with Content-Type ct may be a
// request of a dialect: a missing type (clients that send JSON without
// saying so are common), application/json and any +json type, and
// text/plain, which some clients use to avoid CORS preflights. The policy
// and the benchmarks' peer routers read the same bodies by it.
func JSONMediaType(ct string) bool {
	switch ct {
	case "", "application/json", "application/json; charset=utf-8", "application/json;charset=utf-8", "application/json; charset=UTF-8":
		// What nearly every client sends, without ParseMediaType's map.
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/plain" ||
		(len(mt) > 5 && mt[len(mt)-5:] == "+json")
}

// IdentityEncoding reports whether a body with these Content-Encoding
// values is sent as it is: none, or identity.
func IdentityEncoding(values []string) bool {
	for _, v := range values {
		if v != "" && v != "identity" {
			return false
		}
	}
	return true
}
