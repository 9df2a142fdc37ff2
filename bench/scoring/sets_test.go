package scoring

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sets sources sets.sh (with SMOKE=smoke) in bash, runs script after
// it, and returns its output's lines.
func sets(t *testing.T, smoke, script string) []string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	cmd := exec.Command(bash, "-c", "set -euo pipefail; source ./sets.sh; "+script)
	cmd.Env = append(os.Environ(), "SMOKE="+smoke)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func TestSeeds(t *testing.T) {
	lines := sets(t, "0", `echo "${TUNING_SEEDS[*]}"; echo "${SCORING_SEEDS[*]}"; echo $MC_RUNS $MC_TUNING_SEED_BASE $MC_SCORING_SEED_BASE`)
	tuning, scoring := strings.Fields(lines[0]), strings.Fields(lines[1])
	if len(tuning) < 5 || len(scoring) < 5 {
		t.Errorf("seeds: tuning %v, scoring %v, want at least 5 each", tuning, scoring)
	}
	var mc []int
	for _, f := range strings.Fields(lines[2]) {
		n, _ := strconv.Atoi(f)
		mc = append(mc, n)
	}
	if mc[0] < 5 {
		t.Errorf("MC_RUNS = %d, want at least 5", mc[0])
	}
	// The Mooncake runs' seeds, base + 1 .. base + MC_RUNS.
	for r := 1; r <= mc[0]; r++ {
		tuning = append(tuning, strconv.Itoa(mc[1]+r))
		scoring = append(scoring, strconv.Itoa(mc[2]+r))
	}
	for _, s := range scoring {
		if slices.Contains(tuning, s) {
			t.Errorf("seed %s is in both sets (tuning %v, scoring %v)", s, tuning, scoring)
		}
	}
}

// TestHeldOut: the RAG workload is in the scoring set and nowhere that
// tune.sh reads.
func TestHeldOut(t *testing.T) {
	for _, smoke := range []string{"0", "1"} {
		lines := sets(t, smoke, `printf '%s\n' "${HELDOUT_WORKLOADS[@]}"; echo --; printf '%s\n' "${GEN_WORKLOADS[@]}" "${TUNING_TRACES[@]}"`)
		i := slices.Index(lines, "--")
		held, tuning := lines[:i], lines[i+1:]
		if len(held) == 0 || !strings.Contains(held[0], "-workload rag") {
			t.Errorf("SMOKE=%s: HELDOUT_WORKLOADS = %q, want the rag workload", smoke, held)
		}
		for _, l := range tuning {
			if strings.Contains(l, "rag") {
				t.Errorf("SMOKE=%s: the tuning set holds %q", smoke, l)
			}
		}
	}
	tune, err := os.ReadFile("tune.sh")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(tune), "HELDOUT") || strings.Contains(string(tune), "SCORING_") {
		t.Errorf("tune.sh reads the scoring set")
	}
}

// TestSpread: the conversation trace is spread wherever it runs, and
// its burst replay is named.
func TestSpread(t *testing.T) {
	lines := sets(t, "0", `printf '%s\n' "${TUNING_TRACES[@]}" "${SCORING_TRACES[@]}"`)
	burst := false
	for _, l := range lines {
		name, flags, _ := strings.Cut(l, "|")
		switch {
		case !strings.Contains(flags, "$CONV") && !strings.Contains(flags, "conversation_trace"):
		case strings.HasSuffix(name, "-burst"):
			burst = true
			if !strings.Contains(flags, "-mooncake-spread 0") {
				t.Errorf("%s: %s, want -mooncake-spread 0", name, flags)
			}
		case !strings.Contains(flags, "-mooncake-spread 3s"):
			t.Errorf("%s: %s, want -mooncake-spread 3s", name, flags)
		}
	}
	if !burst {
		t.Errorf("no burst replay among %q", lines)
	}
}

// TestProcedureKnobs: every router has the same budget of variant
// settings, each default lies within its knob's bounds (a categorical
// knob, with none, has names for values, the default not among them),
// prefix_cache's choice races the default cost against the rules, and spec_json
// and knob_json write the JSON a variant runs.
func TestProcedureKnobs(t *testing.T) {
	lines := sets(t, "0", `printf '%s\n' "${PROCEDURE_KNOBS[@]}"; echo --; spec_json prefix_cache load_factor=1.5; spec_json peer_sglang cache_threshold=0.5 balance_abs_threshold=32; spec_json prefix_cache "choice=$(knob_json "" rules)" "cache_weight=$(knob_json 0,16 2)"`)
	i := slices.Index(lines, "--")
	variants := map[string]int{}
	knobs := map[string]string{}
	for _, l := range lines[:i] {
		f := strings.Split(l, "|")
		if len(f) != 5 {
			t.Fatalf("knob %q: want router|knob|default|values|lo,hi", l)
		}
		knobs[f[0]+"|"+f[1]] = f[2] + "|" + f[3]
		if f[4] == "" { // categorical
			values := strings.Fields(f[3])
			if f[2] == "" || len(values) == 0 || slices.Contains(values, f[2]) {
				t.Errorf("categorical knob %q: want a default and other values", l)
			}
			variants[f[0]] += len(values)
			continue
		}
		def, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			t.Fatalf("knob %q: default: %v", l, err)
		}
		lo, hi, _ := strings.Cut(f[4], ",")
		l0, err1 := strconv.ParseFloat(lo, 64)
		h0, err2 := strconv.ParseFloat(hi, 64)
		if err1 != nil || err2 != nil || def < l0 || def > h0 {
			t.Errorf("knob %q: default %v outside bounds %q", l, def, f[4])
		}
		for _, v := range strings.Fields(f[3]) {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < l0 || x > h0 || x == def {
				t.Errorf("knob %q: value %q not a number within the bounds other than the default", l, v)
			}
			variants[f[0]]++
		}
	}
	if got := knobs["prefix_cache|choice"]; got != "cost|rules" {
		t.Errorf("prefix_cache's choice knob: default|values %q, want the default cost raced against the rules", got)
	}
	want := []string{"prefix_cache", "peer_sglang", "peer_llmd", "peer_kubeai", "peer_vllmstack", "peer_dynamo", "peer_dynamo_approx"}
	for _, r := range want {
		if variants[r] != 8 {
			t.Errorf("router %s has %d variant settings, want 8 as every router", r, variants[r])
		}
	}
	if len(variants) != len(want) {
		t.Errorf("routers %v, want %v", variants, want)
	}

	for _, tt := range []struct {
		line string
		want map[string]any
	}{
		{lines[i+1], map[string]any{"policy": "prefix_cache", "load_factor": 1.5, "load_allowance": 16.0, "min_match": 1024.0}},
		{lines[i+2], map[string]any{"policy": "peer_sglang", "cache_threshold": 0.5, "balance_abs_threshold": 32.0}},
		{lines[i+3], map[string]any{"policy": "prefix_cache", "choice": "rules", "cache_weight": 2.0}},
	} {
		var got map[string]any
		if err := json.Unmarshal([]byte(tt.line), &got); err != nil {
			t.Fatalf("spec_json wrote %s: %v", tt.line, err)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("spec_json: %s = %v in %s, want %v", k, got[k], tt.line, v)
			}
		}
		if strings.Count(tt.line, `"load_factor"`) > 1 {
			t.Errorf("spec_json: %s sets load_factor twice", tt.line)
		}
	}
}

// TestFrontierKnob: the race's frontier sweeps a numeric knob of
// prefix_cache that the tuning procedure sweeps, in the full sets and
// in the smoke run alike.
func TestFrontierKnob(t *testing.T) {
	for _, smoke := range []string{"0", "1"} {
		lines := sets(t, smoke, `echo "$FRONTIER_KNOB"; printf '%s\n' "${PROCEDURE_KNOBS[@]}"`)
		if len(lines) == 0 || lines[0] == "" {
			t.Fatalf("SMOKE=%s: no FRONTIER_KNOB", smoke)
		}
		found := false
		for _, l := range lines[1:] {
			f := strings.Split(l, "|")
			if len(f) == 5 && f[0] == "prefix_cache" && f[1] == lines[0] {
				found = true
				if f[4] == "" {
					t.Errorf("SMOKE=%s: the frontier knob %q is categorical", smoke, l)
				}
			}
		}
		if !found {
			t.Errorf("SMOKE=%s: FRONTIER_KNOB %s is not among prefix_cache's PROCEDURE_KNOBS %q", smoke, lines[0], lines[1:])
		}
	}
}

// TestSameCode: a run resumes from a later commit only when that commit
// changed nothing outside bench/results but test files, and never from a
// dirty tree. start_or_resume records the tree, then checks each resume.
func TestSameCode(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not found")
	}
	sets, err := filepath.Abs("sets.sh")
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	sh := func(script string) error {
		cmd := exec.Command(bash, "-c", "set -euo pipefail; source "+sets+"; "+script)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	must := func(script string) {
		t.Helper()
		if err := sh(script); err != nil {
			t.Fatal(err)
		}
	}
	must(`git init -q . && mkdir -p bench/results/race && echo a >code.go && echo 1 >bench/results/race/cell.json &&
		git add . && git commit -qm start && start_or_resume bench/results/race`)
	steps := []struct {
		script string
		resume bool
	}{
		{"true", true},
		{"echo 2 >bench/results/race/cell.json", true}, // a cell rewritten, uncommitted
		{"git commit -qam cells", true},                // the cells committed
		{"echo b >code.go", false},                     // code changed, uncommitted
		{"git commit -qam code", false},                // code changed, committed
		{"git revert --no-edit HEAD >/dev/null", true}, // the code back as it was
		{"echo c >new.go && git add new.go && git commit -qm new", false},
		{"git rm -q new.go && git commit -qm rm", true},
		// Test files are not built into what a run measures.
		{"mkdir -p pkg && echo t >pkg/a_test.go && echo t >b_test.go && git add . && git commit -qm tests", true},
		{"echo u >pkg/a_test.go", true},
		{"echo e >pkg/a.go && git add pkg/a.go && git commit -qm pkg", false},
		{"git rm -q pkg/a.go && git commit -qm rm", true},
	}
	for _, s := range steps {
		must(s.script)
		err := sh("start_or_resume bench/results/race")
		if (err == nil) != s.resume {
			t.Errorf("after %q: start_or_resume = %v, want resume %v", s.script, err, s.resume)
		}
	}
	// A run started from a dirty tree never resumes.
	must(`git checkout -q pkg/a_test.go && echo d >code.go && code_tree >bench/results/race/commit.txt && git checkout -q code.go`)
	if err := sh("same_code bench/results/race"); err == nil {
		t.Error("a run started from a dirty tree resumes")
	}
}
