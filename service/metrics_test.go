package service

import (
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// TestMetricsText: counters by outcome and reason, a cumulative histogram
// and the gauges, in the text format; label values are escaped.
func TestMetricsText(t *testing.T) {
	m := NewMetrics()
	for _, c := range []struct {
		outcome, reason string
		d               time.Duration
	}{{OutcomeOK, "allowed", 3 * time.Millisecond}, {OutcomeOK, "allowed", 40 * time.Millisecond}, {OutcomeDenied, `odd"reason\`, 2 * time.Second}} {
		m.started()
		m.finished(c.outcome, c.reason, c.d)
	}
	m.started() // one still running
	var b strings.Builder
	m.write(&b, gauges{sessions: 3, driverLaunches: 2, procs: core.ProcessStats{Running: 2, Held: 3, Started: 5,
		OutputBytes: 1234, StdinBytes: 56, ResultBytes: 789, Exited: map[string]uint64{core.ProcessOK: 2, core.ProcessKilled: 1}}, auditFailures: 7, held: 32768, heldPeak: 65536})
	out := b.String()
	for _, want := range []string{
		`aleph_sandbox_commands_total{outcome="ok",reason_code="allowed"} 2`,
		`aleph_sandbox_commands_total{outcome="denied",reason_code="odd\"reason\\"} 1`,
		`aleph_sandbox_command_duration_seconds_bucket{le="0.005"} 1`,
		`aleph_sandbox_command_duration_seconds_bucket{le="0.05"} 2`,
		`aleph_sandbox_command_duration_seconds_bucket{le="1"} 2`,
		`aleph_sandbox_command_duration_seconds_bucket{le="2.5"} 3`,
		`aleph_sandbox_command_duration_seconds_bucket{le="+Inf"} 3`,
		`aleph_sandbox_command_duration_seconds_count 3`,
		`aleph_sandbox_commands_in_flight 1`,
		`aleph_sandbox_sessions_active 3`,
		`aleph_sandbox_driver_restarts_total 1`,
		"# TYPE aleph_sandbox_command_duration_seconds histogram",
		`aleph_sandbox_processes_running 2`,
		`aleph_sandbox_processes_held 3`,
		`aleph_sandbox_processes_started_total 5`,
		`aleph_sandbox_processes_exited_total{outcome="ok"} 2`,
		`aleph_sandbox_processes_exited_total{outcome="killed"} 1`,
		`aleph_sandbox_processes_exited_total{outcome="denied"} 0`,
		`aleph_sandbox_process_output_bytes 1234`,
		`aleph_sandbox_process_stdin_bytes 56`,
		`aleph_sandbox_process_result_bytes 789`,
		`aleph_sandbox_audit_write_failures_total 7`,
		`aleph_sandbox_execute_output_held_bytes 32768`,
		`aleph_sandbox_execute_output_held_bytes_max 65536`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
	b.Reset()
	NewMetrics().write(&b, gauges{})
	if !strings.Contains(b.String(), "aleph_sandbox_driver_restarts_total 0\n") {
		t.Errorf("no driver launched yet: %s", b.String())
	}
}

// TestMetricsUsage: the CPU time of the commands that ran adds up, and
// their peak RSS goes into a cumulative histogram in bytes; a result
// without usage (nothing ran) counts nowhere.
func TestMetricsUsage(t *testing.T) {
	m := NewMetrics()
	m.used(&hostv1.CommandUsage{CpuMs: 1500, MaxRssKb: 2 << 10})
	m.used(&hostv1.CommandUsage{CpuMs: 250, MaxRssKb: 100 << 10})
	m.used(nil)
	var b strings.Builder
	m.write(&b, gauges{})
	out := b.String()
	for _, want := range []string{
		"aleph_sandbox_command_cpu_seconds_total 1.75",
		"# TYPE aleph_sandbox_command_max_rss_bytes histogram",
		`aleph_sandbox_command_max_rss_bytes_bucket{le="1.048576e+06"} 0`,
		`aleph_sandbox_command_max_rss_bytes_bucket{le="4.194304e+06"} 1`,
		`aleph_sandbox_command_max_rss_bytes_bucket{le="2.68435456e+08"} 2`,
		`aleph_sandbox_command_max_rss_bytes_bucket{le="+Inf"} 2`,
		"aleph_sandbox_command_max_rss_bytes_count 2",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// TestMetricsViolations: each result's violations add their counts to
// their kind's series; a kind the protocol does not define is "other"
// (the label set stays bounded); the dropped refusals have their own
// counter; every kind's series is there from the start.
func TestMetricsViolations(t *testing.T) {
	m := NewMetrics()
	var b strings.Builder
	m.write(&b, gauges{})
	if !strings.Contains(b.String(), `aleph_sandbox_violations_total{kind="syscall"} 0`+"\n") {
		t.Fatalf("no zero series before any command:\n%s", b.String())
	}
	m.violated([]*hostv1.Violation{{Kind: "syscall", Count: 3}, {Kind: "network", Count: 1}, {Kind: "made-up", Count: 2}}, 7)
	m.violated([]*hostv1.Violation{{Kind: "syscall", Count: 1}}, 0)
	m.violated(nil, 0)
	b.Reset()
	m.write(&b, gauges{})
	out := b.String()
	for _, want := range []string{
		"# TYPE aleph_sandbox_violations_total counter",
		`aleph_sandbox_violations_total{kind="syscall"} 4`,
		`aleph_sandbox_violations_total{kind="network"} 1`,
		`aleph_sandbox_violations_total{kind="spawn"} 0`,
		`aleph_sandbox_violations_total{kind="other"} 2`,
		"aleph_sandbox_violations_dropped_total 7",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "made-up") {
		t.Errorf("an unknown kind became a label:\n%s", out)
	}
}
