// Package scoring holds the scripts of the tuning and scoring sets
// (sets.sh, tune.sh, run.sh); its tests check the sets' invariants: no
// seed shared between the sets, five runs per cell, the held-out
// workload in the scoring set only, and the same tuning budget for
// every router.
package scoring
