package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/child"
)

// wrk runs one wrk pass against port and returns its figures, with the
// CPU time Caddy used meanwhile.
func wrk(cfg config, caddy *child.Proc, port int, script string, conns int, d time.Duration) (result, error) {
	args := []string{"-t", strconv.Itoa(min(cfg.threads, conns)), "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%.0fs", d.Seconds()),
		"--latency", "--timeout", "10s", "-s", script, fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)}
	bin := cfg.wrk
	if cfg.pin {
		args = append([]string{"-c", "0", bin}, args...)
		bin = "taskset"
	}
	before, err := procCPU(caddy.Pid())
	if err != nil {
		return result{}, err
	}
	t0 := time.Now()
	out, err := exec.Command(bin, args...).CombinedOutput()
	elapsed := time.Since(t0)
	if err != nil {
		return result{}, fmt.Errorf("wrk: %v\n%s", err, out)
	}
	after, err := procCPU(caddy.Pid())
	if err != nil {
		return result{}, err
	}
	res, err := parseWrk(string(out))
	if err != nil {
		return result{}, fmt.Errorf("%w\n%s", err, out)
	}
	res.caddyCPU = after - before
	res.caddyUtil = res.caddyCPU / elapsed.Seconds()
	return res, nil
}

var (
	reReqs     = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	reTotal    = regexp.MustCompile(`(\d+) requests in`)
	rePct      = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([0-9.]+)(us|ms|s)\s*$`)
	reNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	reSockErrs = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

func parseWrk(out string) (result, error) {
	var r result
	m := reReqs.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("wrk output has no Requests/sec")
	}
	r.reqs, _ = strconv.ParseFloat(m[1], 64)
	if m := reTotal.FindStringSubmatch(out); m != nil {
		r.requests, _ = strconv.Atoi(m[1])
	}
	for _, m := range rePct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		unit := map[string]float64{"us": 1e3, "ms": 1e6, "s": 1e9}[m[3]]
		d := time.Duration(v * unit)
		if m[1] == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	if r.p99 == 0 {
		return r, errors.New("wrk output has no latency distribution")
	}
	if m := reNon2xx.FindStringSubmatch(out); m != nil {
		n, _ := strconv.Atoi(m[1])
		r.errors += n
	}
	if m := reSockErrs.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.Atoi(s)
			r.errors += n
		}
	}
	return r, nil
}

// procCPU returns the user+system CPU seconds of process pid.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields count from after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks, nil
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

func numCPU() int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "processor") {
			n++
		}
	}
	return n
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
