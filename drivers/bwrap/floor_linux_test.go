//go:build linux

package bwrap

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCommandFloor measures what a session command's isolation costs
// before any code of ours runs: /bin/true started by a fork and exec
// (direct), by a clone into a new PID and mount namespace and an exec
// (the two namespaces a session command gets of its own: its process tree
// is killed whole and hidden from its siblings, its grants are mounted in
// its own view), and through the smallest bwrap sandbox (raw_minimal),
// interleaved as BenchmarkLaunch. Wall time is the p50 of each way, CPU is
// this process's and its reaped children's per command. The ratios of the
// namespaced way to raw_minimal are the floor under the session goals
// (docs/performance.md): a session command cannot cost less than a clone
// into two new namespaces, an exec and the namespaces' teardown.
func BenchmarkCommandFloor(b *testing.B) {
	if os.Geteuid() != 0 {
		// A session command is forked by the supervisor, which holds
		// CAP_SYS_ADMIN in the sandbox's user namespace; outside one a
		// non-root process cannot make the namespaces without a user
		// namespace of its own, which a session command does not pay.
		b.Skip("the namespaced way needs root (CAP_SYS_ADMIN) to be measured as a session command pays it")
	}
	d := benchDriver(b, options{Prepared: preparedOff}, false)
	ws := newWorkspace(b)
	minimal := minimalBwrapArgs(d, ws)
	ways := []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"direct", func() *exec.Cmd { return exec.Command("/bin/true") }},
		{"namespaces", func() *exec.Cmd {
			c := exec.Command("/bin/true")
			c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
			return c
		}},
		{"raw_minimal", func() *exec.Cmd { return exec.Command(d.probe().bwrap, minimal...) }},
	}
	lat := make([][]time.Duration, len(ways))
	cpu := make([]time.Duration, len(ways))
	n := 0
	for b.Loop() {
		for i, w := range ways {
			c0, t := cpuAll(), time.Now()
			if err := w.cmd().Run(); err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			lat[i] = append(lat[i], time.Since(t))
			cpu[i] += cpuAll() - c0
		}
		n++
	}
	perCmd := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	floorWall, floorCPU := p50ms(lat[2]), perCmd(cpu[2])
	for i, w := range ways {
		b.ReportMetric(p50ms(lat[i]), w.name+"_p50_ms")
		b.ReportMetric(perCmd(cpu[i]), w.name+"_cpu_ms/cmd")
		if i < 2 && floorWall > 0 && floorCPU > 0 {
			b.ReportMetric(p50ms(lat[i])/floorWall, w.name+"_x_minimal")
			b.ReportMetric(perCmd(cpu[i])/floorCPU, w.name+"_cpu_x_minimal")
		}
	}
}
