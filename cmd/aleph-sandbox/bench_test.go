package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

func benchFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f runFlags
	f.register(fs)
	fs.Int("n", 100, "")
	fs.Int("concurrency", 1, "")
	return fs
}

// The cold runs get exactly exec's flags: bench's own are dropped with
// their values, whichever way they are spelled, and exec's kept with theirs.
func TestExecFlags(t *testing.T) {
	cases := []struct {
		args, want []string
	}{
		{[]string{"--n", "50", "--", "/bin/true"}, nil},
		{[]string{"--n=50", "-concurrency", "2", "--json", "--", "/bin/true", "--n", "3"}, nil},
		{[]string{"--net", "all", "--n", "5", "--spawn", "--read", "/a,b", "--memory=64", "--json", "/bin/true"},
			[]string{"--net", "all", "--spawn", "--read", "/a,b", "--memory=64"}},
		{[]string{"--session", "s1", "--stdin", "--yes", "--", "cat"}, []string{"--session", "s1", "--stdin", "--yes"}},
	}
	for _, c := range cases {
		if got := execFlags(benchFlagSet(), c.args); !reflect.DeepEqual(got, c.want) {
			t.Errorf("execFlags(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

func TestRatio(t *testing.T) {
	if got := ratio(6, 4); got != 1.5 {
		t.Errorf("ratio(6, 4) = %v, want 1.5", got)
	}
	if got := ratio(6, 0); got != 0 {
		t.Errorf("ratio without a raw figure = %v, want 0", got)
	}
}

// interleave runs the ways in turn, round after round, and stops at the
// first failure naming its round.
func TestInterleave(t *testing.T) {
	var order []string
	way := func(name string, failAt int) func() string {
		calls := 0
		return func() string {
			calls++
			order = append(order, name)
			if calls == failAt {
				return name + " failed"
			}
			return ""
		}
	}
	lat, msg := interleave(3, []benchWay{timed(way("a", 0)), timed(way("b", 0))})
	if msg != "" || len(lat) != 2 || len(lat[0]) != 3 || len(lat[1]) != 3 {
		t.Fatalf("interleave: %q, %d ways", msg, len(lat))
	}
	if got := strings.Join(order, ""); got != "ababab" {
		t.Errorf("order %q, want ababab", got)
	}
	order = nil
	_, msg = interleave(3, []benchWay{timed(way("a", 0)), timed(way("b", 2))})
	if msg != "run 2: b failed" || strings.Join(order, "") != "abab" {
		t.Errorf("failure: %q after %q", msg, strings.Join(order, ""))
	}
}

func TestPrintBench(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	r := benchResult{N: 3, Concurrency: 1, Backend: "bwrap", RawP50MS: 4, PerSecond: 200}
	var out bytes.Buffer
	printBench(&out, r, ms(5, 5, 6), ms(4, 4, 4), ms(12, 12, 13), ms(1, 1, 1))
	for _, want := range []string{"direct exec", "raw bwrap, same flags", "warm pipeline (bwrap)", "cold CLI", "1.25x", "3.00x", "1.00x"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	// The daemon rows follow, each with its ratio; one without figures
	// (serve could not start) has no row.
	out.Reset()
	printBench(&out, r, ms(5), ms(4), ms(12), ms(1), benchRow{"CLI start (--version)", ms(2)},
		benchRow{"serve, session reused", ms(6)}, benchRow{"serve, new session", ms(7)}, benchRow{"exec --host (fresh CLI)", nil})
	for _, want := range []string{"CLI start (--version)      2.000", "0.50x", "serve, session reused      6.000", "1.50x",
		"serve, new session         7.000", "1.75x"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "exec --host") {
		t.Errorf("a row without figures is printed:\n%s", out.String())
	}
	if strings.Contains(out.String(), "one-shot CLI vs raw minimal") {
		t.Errorf("a one-shot ratio without a raw minimal figure:\n%s", out.String())
	}
	if strings.Contains(out.String(), "a session per worker") {
		t.Errorf("a throughput line without its figure:\n%s", out.String())
	}
	// Throughput through serve, a session per worker: its line, with the
	// ratio to raw bwrap's at the same concurrency when there is one.
	tp := r
	tp.ServeConcurrentPerSecond, tp.RawConcurrentPerSecond, tp.ServeConcurrentVsRaw, tp.ThroughputConcurrency = 300, 150, 2, 4
	out.Reset()
	printBench(&out, tp, ms(5), ms(4), ms(12), ms(1))
	if want := "serve, a session per worker: 300.0 commands/s at concurrency 4 (2.00x raw bwrap's 150.0)\n"; !strings.Contains(out.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, out.String())
	}
	tp.RawConcurrentPerSecond, tp.ServeConcurrentVsRaw = 0, 0
	out.Reset()
	printBench(&out, tp, ms(5), ms(4), ms(12), ms(1))
	if want := "at concurrency 4 (no raw bwrap to compare)\n"; !strings.Contains(out.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, out.String())
	}
	// With raw minimal bwrap measured, the one-shot ratio ends the table.
	rm := r
	rm.RawMinimalP50MS = 3
	out.Reset()
	printBench(&out, rm, ms(5), ms(4), ms(12), ms(1))
	if want := "one-shot CLI vs raw minimal bwrap: 4.00x (p50 12.000 ms over 3.000 ms)\n"; !strings.HasSuffix(out.String(), want) {
		t.Errorf("table does not end with %q:\n%s", want, out.String())
	}
	// Without a raw figure (another driver) there is no ratio and no row.
	r.RawP50MS = 0
	out.Reset()
	printBench(&out, r, ms(5), nil, ms(12), ms(1))
	if strings.Contains(out.String(), "raw bwrap") || strings.Contains(out.String(), "x\n") {
		t.Errorf("table without raw figures:\n%s", out.String())
	}
}

// --json keeps every field of the CLI contract and adds the baselines.
func TestBenchJSONFields(t *testing.T) {
	b, err := json.Marshal(benchResult{N: 2, Concurrency: 1, P50MS: 13, RawP50MS: 10, ColdP50MS: 50, WarmVsRaw: 1.3, ColdVsRaw: 5, Backend: "bwrap"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"n", "concurrency", "p50_ms", "p90_ms", "p99_ms", "per_second", "direct_p50_ms", "backend",
		"raw_p50_ms", "cold_p50_ms", "warm_vs_raw", "cold_vs_raw",
		"serve_p50_ms", "host_cli_p50_ms", "cli_start_p50_ms", "serve_vs_raw", "host_cli_vs_raw",
		"raw_minimal_p50_ms", "warm_vs_minimal", "cold_vs_minimal", "serve_vs_minimal", "host_cli_vs_minimal",
		"serve_new_session_p50_ms", "serve_new_session_vs_minimal", "serve_concurrent_per_second",
		"raw_concurrent_per_second", "serve_concurrent_vs_raw", "throughput_concurrency",
		"serve_python_p50_ms", "serve_python_vs_minimal"} {
		if _, ok := m[k]; !ok {
			t.Errorf("--json lacks %q: %s", k, b)
		}
	}
	if len(m) != 30 {
		t.Errorf("--json has %d fields, want 30: %s", len(m), b)
	}
}

// A way that times itself (the raw bwrap runs, timed in the process that
// starts bwrap) is recorded with its own figure, not the call's.
func TestSelfTimedWay(t *testing.T) {
	self := benchWay(func() (time.Duration, string) { return 7 * time.Millisecond, "" })
	lat, msg := interleave(2, []benchWay{self})
	if msg != "" || len(lat[0]) != 2 || lat[0][0] != 7*time.Millisecond || lat[0][1] != 7*time.Millisecond {
		t.Errorf("interleave: %v %q, want two runs of 7ms", lat, msg)
	}
	got, _, msg := measure(3, 2, self)
	if msg != "" || len(got) != 3 || got[2] != 7*time.Millisecond {
		t.Errorf("measure: %v %q, want three runs of 7ms", got, msg)
	}
}

// The CLI links no driver: bench's raw bubblewrap row comes from the driver
// binary's raw mode (drivers/bwrap RawRunsCommand), not from the driver's
// package linked into the host; the pipeline reaches drivers over the
// plugin protocol only.
func TestHostLinksNoDriver(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		cmd := exec.Command(gobin, "list", "-deps", ".")
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps (GOOS=%s): %v", goos, err)
		}
		if !strings.Contains(string(out), "github.com/aleph-sandbox/aleph-sandbox/core\n") {
			t.Fatalf("GOOS=%s: go list -deps does not list core; the check would prove nothing:\n%s", goos, out)
		}
		for _, p := range strings.Fields(string(out)) {
			if strings.HasPrefix(p, "github.com/aleph-sandbox/aleph-sandbox/drivers/") {
				t.Errorf("GOOS=%s: aleph-sandbox links %s", goos, p)
			}
		}
	}
}

// Every field of bench --json is named in docs/cli.md's bench section (a
// field added without its line there fails).
func TestBenchJSONFieldsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(doc), "## bench")
	if start < 0 {
		t.Fatal("docs/cli.md has no bench section")
	}
	text := string(doc[start:])
	typ := reflect.TypeOf(benchResult{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if !strings.Contains(text, "`"+name+"`") && !strings.Contains(text, `"`+name+`"`) {
			t.Errorf("bench --json field %q is not in docs/cli.md's bench section", name)
		}
	}
}
