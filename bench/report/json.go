package report

import (
	"encoding/json"
	"io"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

// JSON writes the results as an indented JSON array.
func JSON(w io.Writer, results []*driver.Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}
