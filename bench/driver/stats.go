package driver

import (
	"math"
	"slices"
	"time"
)

// Percentiles of a latency, in simulated seconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

// percentiles returns the nearest-rank percentiles of ds divided by scale.
func percentiles(ds []time.Duration, scale float64) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))].Seconds() / scale
	}
	return Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}

// EngineLoad is one engine's share of a run.
type EngineLoad struct {
	Addr string `json:"addr"`

	// Requests served, by the client's upstream header.
	Requests int `json:"requests"`

	// HitRate is the engine's own token hit rate.
	HitRate float64 `json:"hit_rate"`

	// MaxInFlight and MeanInFlight are over the /metrics samples.
	MaxInFlight  int     `json:"max_in_flight"`
	MeanInFlight float64 `json:"mean_in_flight"`

	// Preemptions counts requests the engine sent back to its queue for
	// want of KV blocks.
	Preemptions int64 `json:"preemptions"`
}

// loadFigures fills per-engine in-flight figures from the samples and
// counts the samples where some engine carried more than the load bound
// factor x mean + allowance. It returns the largest in-flight seen, the
// mean per engine, and the number of samples over the bound.
func loadFigures(samples [][]int, engines []EngineLoad, factor float64, allowance int) (maxIn int, mean float64, over int) {
	sums := make([]int, len(engines))
	counts := make([]int, len(engines))
	var total, n int
	for _, row := range samples {
		var rowSum, rowN, rowMax int
		for i, v := range row {
			if v < 0 {
				continue
			}
			sums[i] += v
			counts[i]++
			engines[i].MaxInFlight = max(engines[i].MaxInFlight, v)
			rowSum += v
			rowN++
			rowMax = max(rowMax, v)
		}
		if rowN == 0 {
			continue
		}
		total += rowSum
		n += rowN
		if float64(rowMax) > factor*float64(rowSum)/float64(rowN)+float64(allowance) {
			over++
		}
	}
	for i := range engines {
		if counts[i] > 0 {
			engines[i].MeanInFlight = float64(sums[i]) / float64(counts[i])
		}
		maxIn = max(maxIn, engines[i].MaxInFlight)
	}
	if n > 0 {
		mean = float64(total) / float64(n)
	}
	return maxIn, mean, over
}
