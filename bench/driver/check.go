package driver

import (
	"errors"
	"fmt"
)

// Check verifies that a result's figures came out: every run sent
// requests without errors, hit rates lie in [0, 1], a prefix_cache run is
// present with a positive hit rate, and the upper bound, if computed, lies
// in [0, 1]. It checks the pipeline, not the benchmark's targets.
func Check(r *Result) error {
	var errs []error
	if r.Bound != nil && (r.Bound.HitRate < 0 || r.Bound.HitRate > 1 || r.Bound.PromptTokens == 0) {
		errs = append(errs, fmt.Errorf("%s: upper bound %v of %d prompt tokens", r.Workload, r.Bound.HitRate, r.Bound.PromptTokens))
	}
	prefix := false
	for _, run := range r.Runs {
		name := fmt.Sprintf("%s/%s", r.Workload, run.Policy)
		switch {
		case run.Requests == 0 || run.PromptTokens == 0:
			errs = append(errs, fmt.Errorf("%s: %d requests, %d prompt tokens", name, run.Requests, run.PromptTokens))
		case run.Errors > 0:
			errs = append(errs, fmt.Errorf("%s: %d errors, first: %v", name, run.Errors, run.FirstErrors))
		case run.HitRate < 0 || run.HitRate > 1:
			errs = append(errs, fmt.Errorf("%s: hit rate %v outside [0, 1]", name, run.HitRate))
		case run.TTFT.P50 <= 0 || run.OutputTPS <= 0:
			errs = append(errs, fmt.Errorf("%s: TTFT p50 %v, output %v tokens/s", name, run.TTFT.P50, run.OutputTPS))
		}
		if run.Policy == "prefix_cache" {
			prefix = true
			if run.HitRate <= 0 {
				errs = append(errs, fmt.Errorf("%s: hit rate %v", name, run.HitRate))
			}
		}
	}
	if !prefix {
		errs = append(errs, fmt.Errorf("%s: no prefix_cache run", r.Workload))
	}
	return errors.Join(errs...)
}
