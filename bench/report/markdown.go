package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

// Markdown writes a heading, a line of context and a table per result.
func Markdown(w io.Writer, results []*driver.Result) error {
	var b strings.Builder
	for i, r := range results {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "### %s\n\n", r.Workload)
		fmt.Fprintf(&b, "%s. %d engines (KV cache %d tokens each, time scale %g).", r.Description, r.Engines,
			r.Engine.KVBlocks*r.Engine.BlockSize, r.Engine.TimeScale)
		if r.Bound != nil {
			fmt.Fprintf(&b, " Upper bound (one infinite cache): token hit rate %.3f.", r.Bound.HitRate)
		}
		if r.LoadFactor > 0 {
			fmt.Fprintf(&b, " Load bound checked: load_factor %g, load_allowance %d.", r.LoadFactor, r.LoadAllowance)
		}
		b.WriteString("\n\n")
		Table(&b, r)
	}
	if len(results) > 0 {
		b.WriteString("\n" + Legend + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Legend explains the columns of the tables.
const Legend = "hit rate: cached / prompt tokens, from the engines' usage chunks. " +
	"of bound: hit rate / upper bound. TTFT: at the client, to the first content token, in simulated time. " +
	"output tok/s: per simulated second. in-flight: running + waiting requests from the engines' /metrics, " +
	"max over engines and samples / mean per engine and sample. over bound: requests sent to an engine that " +
	"already carried prefix_cache's load bound, ceil(load_factor x (all in-flight + 1) / engines) + load_allowance, by the client's count. " +
	"timer lag: how late a 10 ms sleep woke up during the run (wall time); tens of ms mean the machine was short of CPU and every engine ran slower than simulated."

// Table writes the table of one result: a row per policy and load.
func Table(b *strings.Builder, r *driver.Result) {
	load := "QPS"
	if len(r.Runs) > 0 && r.Runs[0].QPS == 0 {
		load = "users"
	}
	fmt.Fprintf(b, "| policy | %s | requests | hit rate | of bound | TTFT p50 | TTFT p90 | TTFT p99 | output tok/s | errors | in-flight max / mean | over bound | timer lag p99 |\n", load)
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, run := range r.Runs {
		l := fmt.Sprintf("%g", run.QPS)
		if run.QPS == 0 {
			l = fmt.Sprint(run.Users)
		}
		share := "-"
		if r.Bound != nil {
			share = fmt.Sprintf("%.0f%%", 100*run.ShareOfBound)
		}
		over := fmt.Sprint(run.OverBoundAdmissions)
		fmt.Fprintf(b, "| %s | %s | %d | %.3f | %s | %s | %s | %s | %.0f | %d | %d / %.1f | %s | %.1f ms |\n",
			run.Policy, l, run.Requests, run.HitRate, share,
			seconds(run.TTFT.P50), seconds(run.TTFT.P90), seconds(run.TTFT.P99),
			run.OutputTPS, run.Errors, run.MaxInFlight, run.MeanInFlight, over, run.TimerLag.P99)
	}
}

// seconds formats a latency in seconds with a unit that keeps it short.
func seconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}
