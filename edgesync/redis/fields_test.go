package redis

import (
	"reflect"
	"slices"
	"testing"
)

// The module holds its configuration (exported, with a JSON tag) and the
// state Provision builds; what only tests set (the reconnect backoff, a
// name to keep two edges of one process apart) is a tuning passed to
// provision, not a field of the module.
func TestTransportHoldsNoTestOnlyFields(t *testing.T) {
	state := []string{"key", "conn", "mu", "cancels", "release"}
	typ := reflect.TypeFor[Transport]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.IsExported() {
			if f.Tag.Get("json") == "" {
				t.Errorf("Transport.%s is exported without a JSON tag", f.Name)
			}
			continue
		}
		if !slices.Contains(state, f.Name) {
			t.Errorf("Transport.%s is neither configuration nor the state Provision builds", f.Name)
		}
	}
}
