package caddymodule

import (
	"testing"
	"time"
)

// A command counts once, only within commandWindow of the receiver's
// clock, and at most maxSeenCommands of them within the window.
func TestCommandFreshness(t *testing.T) {
	var ss syncState
	now := time.Now()
	sent := now.Add(-time.Second).UnixNano()
	for _, tt := range []struct {
		name   string
		origin uint64
		sent   int64
		want   bool
	}{
		{"first", 1, sent, true},
		{"the same again", 1, sent, false},
		{"another edge's at the same time", 2, sent, true},
		{"held back past the window", 1, now.Add(-commandWindow - time.Second).UnixNano(), false},
		{"from past the window ahead", 1, now.Add(commandWindow + time.Second).UnixNano(), false},
		{"within the window ahead", 1, now.Add(commandWindow / 2).UnixNano(), true},
	} {
		if got := ss.fresh(tt.origin, tt.sent, now); got != tt.want {
			t.Errorf("%s: fresh(%d, %d) = %v, want %v", tt.name, tt.origin, tt.sent, got, tt.want)
		}
	}
	for i := range maxSeenCommands {
		ss.fresh(3, sent+int64(i), now)
	}
	if len(ss.seen) > maxSeenCommands {
		t.Errorf("%d commands remembered, more than %d", len(ss.seen), maxSeenCommands)
	}
	if ss.fresh(4, sent, now) {
		t.Errorf("fresh accepted a command past %d within the window", maxSeenCommands)
	}
	// Once the window has passed, the old ones make room.
	if !ss.fresh(4, now.Add(commandWindow+time.Minute).UnixNano(), now.Add(commandWindow+time.Minute)) {
		t.Errorf("fresh refused a new command once the remembered ones aged out")
	}
}
