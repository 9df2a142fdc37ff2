package driver

import (
	"context"
	"time"
)

// lagInterval is the lag probe's sleep.
const lagInterval = 10 * time.Millisecond

// lagProbe measures how late the Go runtime wakes a goroutine from a
// sleep. The engines simulate time by sleeping, so when the machine is
// short of CPU every step runs long and every policy looks slower; the
// probe's lag says how much a run suffered from it.
type lagProbe struct {
	lags []time.Duration
}

// run sleeps lagInterval at a time until ctx is done, recording each
// oversleep. Read lags only after run has returned.
func (p *lagProbe) run(ctx context.Context) {
	timer := time.NewTimer(lagInterval)
	defer timer.Stop()
	for {
		t0 := time.Now()
		timer.Reset(lagInterval)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		p.lags = append(p.lags, max(0, time.Since(t0)-lagInterval))
	}
}
