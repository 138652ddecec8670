//go:build linux

package conformance

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// procStats is what the robustness cases measure in the driver's process.
type procStats struct {
	fds         int
	descendants []int
}

func measureProc(pid int) (procStats, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return procStats{}, err
	}
	return procStats{fds: len(ents), descendants: descendants(pid)}, nil
}

// descendants lists every process below pid, by walking parent links of
// all processes once.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name may hold spaces and parentheses: fields start
		// after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

const leakMeasurable = true

// processAlive reports whether pid exists (and is not a zombie).
func processAlive(pid int) (alive, known bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false, true
	}
	i := bytes.LastIndexByte(b, ')')
	if i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
		return false, true
	}
	return true, true
}

// killTagged kills every process whose command line carries tag: the
// survivors of a driver that failed to kill a tree. Only processes the
// suite started carry the tag.
func killTagged(tag string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(tag)) {
			continue
		}
		if syscall.Kill(p, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// peakRSSKB and rssKB read VmHWM and VmRSS of pid.
func memKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
