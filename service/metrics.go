package service

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

const nBuckets = 14

// latencyBuckets are the upper bounds (seconds) of the command latency
// histogram: from a warm /bin/true (a few ms) to long builds.
func latencyBuckets() [nBuckets]float64 {
	return [nBuckets]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
}

// Metrics are the service's counters, written in the Prometheus text
// exposition format (version 0.0.4) by hand: the handful of series here do
// not need a client library and its dependencies in every binary.
type Metrics struct {
	mu       sync.Mutex
	commands map[outcomeKey]uint64
	buckets  [nBuckets]uint64
	count    uint64
	sum      float64
	inFlight int64
	// quiesced: the server stops and takes no more commands (DrainWait).
	quiesced bool
	// files counts the files API's calls by op and reason code.
	files map[outcomeKey]uint64
	// What the commands that ran consumed: CPU seconds in total, and
	// their peak RSS as a histogram.
	cpuSeconds float64
	rssBuckets [nRSSBuckets]uint64
	rssCount   uint64
	rssSum     float64
	// What the sandbox refused the commands that ran, by kind, and the
	// refusals past a result's bound.
	violations map[string]uint64
	vDropped   uint64
}

const nRSSBuckets = 8

// rssBuckets are the upper bounds (bytes) of the peak-RSS histogram: from
// a small tool (1 MiB) to a large build (4 GiB).
func rssBuckets() [nRSSBuckets]float64 {
	const mib = 1 << 20
	return [nRSSBuckets]float64{1 * mib, 4 * mib, 16 * mib, 64 * mib, 256 * mib, 1024 * mib, 2048 * mib, 4096 * mib}
}

type outcomeKey struct{ outcome, reason string }

// NewMetrics returns empty counters.
func NewMetrics() *Metrics {
	return &Metrics{commands: map[outcomeKey]uint64{}, files: map[outcomeKey]uint64{}}
}

// file records one call of the files API: op and the reason code of its
// error ("ok" when it succeeded).
func (m *Metrics) file(op string, err error) {
	reason := "ok"
	if err != nil {
		reason = "error"
		if d := detailOf(err); d != nil && d.GetReasonCode() != "" {
			reason = d.GetReasonCode()
		}
	}
	m.mu.Lock()
	m.files[outcomeKey{op, reason}]++
	m.mu.Unlock()
}

// Outcomes of a command, the "outcome" label.
const (
	OutcomeOK     = "ok"     // the command ran and exited (any status)
	OutcomeDenied = "denied" // refused by policy, approval or rate limit
	OutcomeError  = "error"  // the sandbox could not run it, or it was cancelled
)

// started counts a command in flight, or reports false once the server
// stopped taking commands (quiesce).
func (m *Metrics) started() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.quiesced {
		return false
	}
	m.inFlight++
	return true
}

// quiesceIfIdle stops the taking of commands if none is in flight, in one
// step with the count (so none can start between the look and the stop),
// and reports whether it did.
func (m *Metrics) quiesceIfIdle() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inFlight == 0 {
		m.quiesced = true
	}
	return m.quiesced
}

// quiesce stops the taking of commands whatever is in flight.
func (m *Metrics) quiesce() {
	m.mu.Lock()
	m.quiesced = true
	m.mu.Unlock()
}

// finished records one Execute call.
func (m *Metrics) finished(outcome, reason string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inFlight--
	m.commands[outcomeKey{outcome, reason}]++
	s := d.Seconds()
	for i, b := range latencyBuckets() {
		if s <= b {
			m.buckets[i]++
		}
	}
	m.count++
	m.sum += s
}

// used records what a command that ran consumed (nil: not measured).
func (m *Metrics) used(u *hostv1.CommandUsage) {
	if u == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cpuSeconds += float64(u.GetCpuMs()) / 1000
	rss := float64(u.GetMaxRssKb()) * 1024
	for i, b := range rssBuckets() {
		if rss <= b {
			m.rssBuckets[i]++
		}
	}
	m.rssCount++
	m.rssSum += rss
}

// violated counts what the sandbox refused a command that ran. Kinds are
// the protocol's few; any other a driver sends is counted as "other", so
// the series stay bounded.
func (m *Metrics) violated(vs []*hostv1.Violation, dropped int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.violations == nil {
		m.violations = map[string]uint64{}
	}
	for _, v := range vs {
		kind := v.GetKind()
		if !slices.Contains(driverapi.ViolationKinds(), kind) {
			kind = "other"
		}
		m.violations[kind] += uint64(max(v.GetCount(), 0))
	}
	m.vDropped += uint64(max(dropped, 0))
}

// Gauges are read when scraped, from the server's state.
type gauges struct {
	sessions       int
	driverLaunches int64
	procs          core.ProcessStats
	auditFailures  int64
	connsOpen      int
	refusedTotal   int64
	refusedPeer    int64
	held, heldPeak int64
}

// processOutcomes are the outcome labels of processes_exited_total, each
// written (0 too) so a rate over any of them is defined from the start.
func processOutcomes() []string {
	return []string{core.ProcessDenied, core.ProcessError, core.ProcessKilled, core.ProcessOK, core.ProcessTimedOut}
}

func (m *Metrics) write(w io.Writer, g gauges) {
	m.mu.Lock()
	keys := make([]outcomeKey, 0, len(m.commands))
	for k := range m.commands {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].outcome != keys[j].outcome {
			return keys[i].outcome < keys[j].outcome
		}
		return keys[i].reason < keys[j].reason
	})
	var b strings.Builder
	b.WriteString("# HELP aleph_sandbox_commands_total Commands answered, by outcome and reason code.\n")
	b.WriteString("# TYPE aleph_sandbox_commands_total counter\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "aleph_sandbox_commands_total{outcome=%s,reason_code=%s} %d\n", label(k.outcome), label(k.reason), m.commands[k])
	}
	b.WriteString("# HELP aleph_sandbox_command_duration_seconds Time from request to result.\n")
	b.WriteString("# TYPE aleph_sandbox_command_duration_seconds histogram\n")
	for i, ub := range latencyBuckets() {
		fmt.Fprintf(&b, "aleph_sandbox_command_duration_seconds_bucket{le=\"%s\"} %d\n", strconv.FormatFloat(ub, 'g', -1, 64), m.buckets[i])
	}
	fmt.Fprintf(&b, "aleph_sandbox_command_duration_seconds_bucket{le=\"+Inf\"} %d\n", m.count)
	fmt.Fprintf(&b, "aleph_sandbox_command_duration_seconds_sum %s\n", strconv.FormatFloat(m.sum, 'g', -1, 64))
	fmt.Fprintf(&b, "aleph_sandbox_command_duration_seconds_count %d\n", m.count)
	b.WriteString("# HELP aleph_sandbox_command_cpu_seconds_total CPU time (user and system) of the commands that ran through Execute or StartProcess.\n")
	b.WriteString("# TYPE aleph_sandbox_command_cpu_seconds_total counter\n")
	fmt.Fprintf(&b, "aleph_sandbox_command_cpu_seconds_total %s\n", strconv.FormatFloat(m.cpuSeconds, 'g', -1, 64))
	b.WriteString("# HELP aleph_sandbox_command_max_rss_bytes Peak resident set size of each command that ran through Execute or StartProcess (its largest process).\n")
	b.WriteString("# TYPE aleph_sandbox_command_max_rss_bytes histogram\n")
	for i, ub := range rssBuckets() {
		fmt.Fprintf(&b, "aleph_sandbox_command_max_rss_bytes_bucket{le=\"%s\"} %d\n", strconv.FormatFloat(ub, 'g', -1, 64), m.rssBuckets[i])
	}
	fmt.Fprintf(&b, "aleph_sandbox_command_max_rss_bytes_bucket{le=\"+Inf\"} %d\n", m.rssCount)
	fmt.Fprintf(&b, "aleph_sandbox_command_max_rss_bytes_sum %s\n", strconv.FormatFloat(m.rssSum, 'g', -1, 64))
	fmt.Fprintf(&b, "aleph_sandbox_command_max_rss_bytes_count %d\n", m.rssCount)
	b.WriteString("# HELP aleph_sandbox_violations_total What the sandbox refused the commands that ran through Execute (each result's violations, their counts), by kind.\n")
	b.WriteString("# TYPE aleph_sandbox_violations_total counter\n")
	for _, kind := range append(driverapi.ViolationKinds(), "other") {
		fmt.Fprintf(&b, "aleph_sandbox_violations_total{kind=%q} %d\n", kind, m.violations[kind])
	}
	b.WriteString("# HELP aleph_sandbox_violations_dropped_total Refusals past a result's bound of distinct violations (sandbox.max_violations), counted, not listed.\n")
	b.WriteString("# TYPE aleph_sandbox_violations_dropped_total counter\n")
	fmt.Fprintf(&b, "aleph_sandbox_violations_dropped_total %d\n", m.vDropped)
	b.WriteString("# HELP aleph_sandbox_commands_in_flight Commands running now.\n")
	b.WriteString("# TYPE aleph_sandbox_commands_in_flight gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_commands_in_flight %d\n", m.inFlight)
	fkeys := make([]outcomeKey, 0, len(m.files))
	for k := range m.files {
		fkeys = append(fkeys, k)
	}
	sort.Slice(fkeys, func(i, j int) bool {
		if fkeys[i].outcome != fkeys[j].outcome {
			return fkeys[i].outcome < fkeys[j].outcome
		}
		return fkeys[i].reason < fkeys[j].reason
	})
	b.WriteString("# HELP aleph_sandbox_file_operations_total Calls of the files API, by operation and reason code (ok when done).\n")
	b.WriteString("# TYPE aleph_sandbox_file_operations_total counter\n")
	for _, k := range fkeys {
		fmt.Fprintf(&b, "aleph_sandbox_file_operations_total{op=%s,reason_code=%s} %d\n", label(k.outcome), label(k.reason), m.files[k])
	}
	m.mu.Unlock()
	b.WriteString("# HELP aleph_sandbox_sessions_active Sessions this service has run or been asked about and not forgotten.\n")
	b.WriteString("# TYPE aleph_sandbox_sessions_active gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_sessions_active %d\n", g.sessions)
	restarts := g.driverLaunches - 1
	if restarts < 0 {
		restarts = 0
	}
	b.WriteString("# HELP aleph_sandbox_driver_restarts_total Driver processes launched after the first (each follows a driver that died).\n")
	b.WriteString("# TYPE aleph_sandbox_driver_restarts_total counter\n")
	fmt.Fprintf(&b, "aleph_sandbox_driver_restarts_total %d\n", restarts)
	b.WriteString("# HELP aleph_sandbox_audit_write_failures_total Audit records that could not be written (removed again, never left half-written).\n")
	b.WriteString("# TYPE aleph_sandbox_audit_write_failures_total counter\n")
	fmt.Fprintf(&b, "aleph_sandbox_audit_write_failures_total %d\n", g.auditFailures)
	b.WriteString("# HELP aleph_sandbox_connections_open Connections open now (what serve.max_connections counts).\n")
	b.WriteString("# TYPE aleph_sandbox_connections_open gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_connections_open %d\n", g.connsOpen)
	b.WriteString("# HELP aleph_sandbox_connections_refused_total Connections closed at once at a cap, by the cap (serve.max_connections: total; serve.max_connections_per_peer: per_peer).\n")
	b.WriteString("# TYPE aleph_sandbox_connections_refused_total counter\n")
	fmt.Fprintf(&b, "aleph_sandbox_connections_refused_total{limit=\"per_peer\"} %d\n", g.refusedPeer)
	fmt.Fprintf(&b, "aleph_sandbox_connections_refused_total{limit=\"total\"} %d\n", g.refusedTotal)
	p := g.procs
	b.WriteString("# HELP aleph_sandbox_processes_running Processes (StartProcess) running now.\n")
	b.WriteString("# TYPE aleph_sandbox_processes_running gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_processes_running %d\n", p.Running)
	b.WriteString("# HELP aleph_sandbox_processes_held Processes in the table: running, or ended and not yet waited for (what the caps count).\n")
	b.WriteString("# TYPE aleph_sandbox_processes_held gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_processes_held %d\n", p.Held)
	b.WriteString("# HELP aleph_sandbox_processes_started_total Processes started.\n")
	b.WriteString("# TYPE aleph_sandbox_processes_started_total counter\n")
	fmt.Fprintf(&b, "aleph_sandbox_processes_started_total %d\n", p.Started)
	b.WriteString("# HELP aleph_sandbox_processes_exited_total Processes ended, by outcome.\n")
	b.WriteString("# TYPE aleph_sandbox_processes_exited_total counter\n")
	for _, o := range processOutcomes() {
		fmt.Fprintf(&b, "aleph_sandbox_processes_exited_total{outcome=%s} %d\n", label(o), p.Exited[o])
	}
	b.WriteString("# HELP aleph_sandbox_process_output_bytes Output the processes' rings hold.\n")
	b.WriteString("# TYPE aleph_sandbox_process_output_bytes gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_process_output_bytes %d\n", p.OutputBytes)
	b.WriteString("# HELP aleph_sandbox_execute_output_held_bytes Output Execute calls hold now: chunks on their way to the client and the unstreamed rest a result carries (streamed output is never held again).\n")
	b.WriteString("# TYPE aleph_sandbox_execute_output_held_bytes gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_execute_output_held_bytes %d\n", g.held)
	b.WriteString("# HELP aleph_sandbox_execute_output_held_bytes_max The most output Execute calls held at once since the service started.\n")
	b.WriteString("# TYPE aleph_sandbox_execute_output_held_bytes_max gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_execute_output_held_bytes_max %d\n", g.heldPeak)
	b.WriteString("# HELP aleph_sandbox_process_result_bytes Output kept for the processes' results (WaitProcess), within each one's budget, besides their rings.\n")
	b.WriteString("# TYPE aleph_sandbox_process_result_bytes gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_process_result_bytes %d\n", p.ResultBytes)
	b.WriteString("# HELP aleph_sandbox_process_stdin_bytes Stdin written to processes and not yet read by them.\n")
	b.WriteString("# TYPE aleph_sandbox_process_stdin_bytes gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_process_stdin_bytes %d\n", p.StdinBytes)
	_, _ = io.WriteString(w, b.String())
}

// label quotes a label value as the text format wants it.
func label(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(v) + `"`
}

// MetricsHandler serves /metrics, /healthz and /readyz (health.go).
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	s.healthRoutes(mux)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		g := gauges{sessions: len(s.sessions)}
		s.mu.Unlock()
		g.held, g.heldPeak = s.held.now.Load(), s.held.peak.Load()
		g.procs = s.procs.Stats()
		if s.driverLaunches != nil {
			g.driverLaunches = s.driverLaunches()
		}
		g.connsOpen, g.refusedTotal, g.refusedPeer = s.conns.stats()
		if a, ok := s.host.(interface{ AuditFailures() int64 }); ok {
			g.auditFailures = a.AuditFailures()
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.metrics.write(w, g)
		s.writeCapacity(r.Context(), w, g)
		s.writeIdleMetrics(w)
	})
	return mux
}
