//go:build linux

// Package cgroup is the Linux driver's cgroups: which mode this host offers
// (v2 where a subtree is delegated, else v1 where the controllers are
// writable, else none, with the reason), one cgroup per command with its
// memory, pids and cpu limits applied (never any swap), the command's
// move into it, its OOM kills, its removal, and the sweep of what killed
// drivers left. It knows nothing of sandboxes: the driver decides which
// limits a command gets and starts the process.
package cgroup

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/ownertag"
)

// Mode is a cgroup mode: the one a driver's options ask for (Auto, V2, V1,
// None; the same strings as the driver's cgroup option) or the one in force.
type Mode string

// The cgroup modes.
const (
	Auto Mode = "auto"
	V2   Mode = "v2"
	V1   Mode = "v1"
	None Mode = "none"
)

// Resource controllers the driver uses; a System says which it has.
const (
	Memory = "memory"
	Pids   = "pids"
	CPU    = "cpu"
)

// cpuPeriodUS is the CFS period; cpu_quota_percent scales the quota.
const cpuPeriodUS = 100_000

// System is what the driver found out about cgroups on this host: the
// mode in force and, per controller, where per-command cgroups go, or why
// they cannot.
type System struct {
	mode Mode // V2, V1 or None
	// v2: the directory under which per-command cgroups are created (the
	// driver's own cgroup, whose subtree_control enables the controllers).
	v2Base string
	// v1: controller -> the driver's own cgroup directory in that hierarchy.
	v1Base map[string]string
	// have lists the controllers usable in this mode.
	have map[string]bool
	// memsw: v1 memory.memsw is present (swap is limited too).
	memsw bool
	// why a controller (or the whole mode) is unavailable.
	why map[string]string
}

// Unavailable is a System without cgroups, for why.
func Unavailable(why string) *System {
	return &System{mode: None, have: map[string]bool{}, why: map[string]string{"*": why}}
}

// Mode is the mode in force: V2, V1 or None.
func (cs *System) Mode() Mode { return cs.mode }

// Has reports whether controller ctrl is usable.
func (cs *System) Has(ctrl string) bool { return cs.have[ctrl] }

// Memsw reports whether v1's memory.memsw is present (swap is limited too).
func (cs *System) Memsw() bool { return cs.memsw }

// Reason says why controller ctrl (or "*": the mode asked for) is not
// available.
func (cs *System) Reason(ctrl string) string {
	if r := cs.why[ctrl]; r != "" {
		return r
	}
	if r := cs.why["*"]; r != "" {
		return r
	}
	return "the " + ctrl + " controller is not available"
}

// Bases are the directories under which command cgroups are made: the v2
// base, or the driver's own cgroup in each v1 hierarchy.
func (cs *System) Bases() []string {
	var bases []string
	for _, b := range cs.v1Base {
		bases = append(bases, b)
	}
	if cs.v2Base != "" {
		bases = append(bases, cs.v2Base)
	}
	return bases
}

// errNoCgroup is a cgroup mode that cannot be used here.
type errNoCgroup struct{ reason string }

func (e *errNoCgroup) Error() string { return e.reason }

// Detect inspects the cgroup filesystem at root for the process
// whose /proc/<pid>/cgroup content is selfCgroup, preparing delegation
// where needed. want selects the mode (auto tries v2, then v1).
func Detect(root string, selfCgroup []byte, want Mode, pid int) *System {
	none := &System{mode: None, have: map[string]bool{}, why: map[string]string{}}
	if want == None {
		none.why["*"] = "cgroup = \"none\" in the driver options"
		return none
	}
	var v2err, v1err error
	if want == Auto || want == V2 {
		cs, err := detectV2(root, selfCgroup, pid)
		if err == nil {
			return cs
		}
		v2err = err
	}
	if want == Auto || want == V1 {
		cs, err := detectV1(root, selfCgroup)
		if err == nil {
			return cs
		}
		v1err = err
	}
	var reasons []string
	if v2err != nil {
		reasons = append(reasons, "cgroup v2: "+v2err.Error())
	}
	if v1err != nil {
		reasons = append(reasons, "cgroup v1: "+v1err.Error())
	}
	none.why["*"] = strings.Join(reasons, "; ")
	return none
}

// selfPath returns the cgroup path of hierarchy id "0" (v2) or of the v1
// line listing controller.
func selfPath(selfCgroup []byte, controller string) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(selfCgroup))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" {
			if parts[0] == "0" && parts[1] == "" {
				return parts[2], true
			}
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				return parts[2], true
			}
		}
	}
	return "", false
}

func detectV2(root string, selfCgroup []byte, pid int) (*System, error) {
	mount := ""
	for _, m := range []string{root, filepath.Join(root, "unified")} {
		if _, err := os.Stat(filepath.Join(m, "cgroup.controllers")); err == nil {
			mount = m
			break
		}
	}
	if mount == "" {
		return nil, &errNoCgroup{"no cgroup2 filesystem at " + root}
	}
	rel, ok := selfPath(selfCgroup, "")
	if !ok {
		return nil, &errNoCgroup{"this process has no cgroup v2 membership"}
	}
	own := filepath.Join(mount, filepath.Clean("/"+rel))
	data, err := os.ReadFile(filepath.Join(own, "cgroup.controllers"))
	if err != nil {
		return nil, &errNoCgroup{fmt.Sprintf("cannot read the controllers of %s: %v", own, unwrapPathErr(err))}
	}
	avail := map[string]bool{}
	for _, c := range strings.Fields(string(data)) {
		avail[c] = true
	}
	if !avail[Memory] || !avail[Pids] {
		return nil, &errNoCgroup{fmt.Sprintf("%s offers controllers %q, memory and pids are needed", own, strings.TrimSpace(string(data)))}
	}
	want := []string{Memory, Pids}
	if avail[CPU] {
		want = append(want, CPU)
	}
	if err := delegateV2(own, want, pid); err != nil {
		return nil, err
	}
	cs := &System{mode: V2, v2Base: own, have: map[string]bool{}, why: map[string]string{}}
	for _, c := range want {
		cs.have[c] = true
	}
	if !avail[CPU] {
		cs.why[CPU] = "the cpu controller is not delegated to " + own
	}
	return cs, nil
}

// delegateV2 makes own able to hold per-command child cgroups with the
// controllers enabled. cgroup v2 forbids enabling controllers for children
// of a cgroup that itself holds processes ("no internal processes"), so
// when the driver sits in own it first moves itself into the leaf
// own/aleph-driver, as container runtimes do in a delegated scope.
func delegateV2(own string, want []string, pid int) error {
	if enabled(own, want) {
		return nil
	}
	procs, _ := os.ReadFile(filepath.Join(own, "cgroup.procs"))
	if len(bytes.TrimSpace(procs)) > 0 {
		leaf := filepath.Join(own, "aleph-driver")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return &errNoCgroup{fmt.Sprintf("%s is not writable: %v", own, unwrapPathErr(err))}
		}
		if err := writeCg(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return &errNoCgroup{fmt.Sprintf("cannot move the driver into %s: %v", leaf, err)}
		}
	}
	var b strings.Builder
	for i, c := range want {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("+" + c)
	}
	if err := writeCg(filepath.Join(own, "cgroup.subtree_control"), b.String()); err != nil {
		return &errNoCgroup{fmt.Sprintf("cannot enable %v in %s: %v", want, own, err)}
	}
	if !enabled(own, want) {
		return &errNoCgroup{fmt.Sprintf("%v not enabled in %s/cgroup.subtree_control", want, own)}
	}
	return nil
}

func enabled(dir string, want []string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return false
	}
	on := map[string]bool{}
	for _, c := range strings.Fields(string(data)) {
		on[strings.TrimPrefix(c, "+")] = true
	}
	for _, c := range want {
		if !on[c] {
			return false
		}
	}
	return true
}

func detectV1(root string, selfCgroup []byte) (*System, error) {
	cs := &System{mode: V1, v1Base: map[string]string{}, have: map[string]bool{}, why: map[string]string{}}
	for _, c := range []string{Memory, Pids, CPU} {
		rel, ok := selfPath(selfCgroup, c)
		if !ok {
			cs.why[c] = "the " + c + " controller is not mounted (cgroup v1)"
			continue
		}
		dir := filepath.Join(root, c, filepath.Clean("/"+rel))
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			cs.why[c] = fmt.Sprintf("%s: %v", dir, unwrapPathErr(err))
			continue
		}
		// Writable means: a child cgroup can be created and removed.
		probe := filepath.Join(dir, "aleph-probe-"+randHex(6))
		if err := os.Mkdir(probe, 0o755); err != nil {
			cs.why[c] = fmt.Sprintf("%s is not writable by uid %d: %v", dir, os.Geteuid(), unwrapPathErr(err))
			continue
		}
		_ = os.Remove(probe)
		cs.v1Base[c], cs.have[c] = dir, true
	}
	if len(cs.have) == 0 {
		var r []string
		for _, c := range []string{Memory, Pids, CPU} {
			r = append(r, cs.why[c])
		}
		return nil, &errNoCgroup{strings.Join(r, "; ")}
	}
	if cs.have[Memory] {
		_, err := os.Stat(filepath.Join(cs.v1Base[Memory], "memory.memsw.limit_in_bytes"))
		cs.memsw = err == nil
	}
	return cs, nil
}

// Limits are one command's limits.
type Limits struct {
	MemoryBytes     uint64
	Pids            uint64
	CPUQuotaPercent uint64
}

// Command is one command's cgroup (one directory per hierarchy on v1).
// A nil *Command is no cgroup: SetupOOM and Remove accept it.
type Command struct {
	name string
	mode Mode
	dirs map[string]string // controller -> dir (v2: every controller maps to the one dir)
	fd   int               // v2: open directory for CLONE_INTO_CGROUP, else -1
	// lim and memsw are what create applied (v1), for join to apply again.
	lim   Limits
	memsw bool
}

// Create makes a command cgroup with lim applied. Only controllers with a
// limit to enforce are used on v1 (each hierarchy costs a mkdir/rmdir).
// owner is the ownertag.Self of the creating driver: the name says whose the
// cgroup is, so a later driver can remove the cgroups of a dead one at once.
func (cs *System) Create(lim Limits, owner string) (*Command, error) {
	name := Prefix + owner + "-" + randHex(8)
	cg := &Command{name: name, mode: cs.mode, dirs: map[string]string{}, fd: -1}
	switch cs.mode {
	case V2:
		dir := filepath.Join(cs.v2Base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for c := range cs.have {
			cg.dirs[c] = dir
		}
		if err := cg.applyV2(dir, lim, cs.have); err != nil {
			cg.Remove()
			return nil, err
		}
		fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			cg.Remove()
			return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
		}
		cg.fd = fd
	case V1:
		need := map[string]bool{
			Memory: lim.MemoryBytes > 0 && cs.have[Memory],
			Pids:   lim.Pids > 0 && cs.have[Pids],
			CPU:    lim.CPUQuotaPercent > 0 && cs.have[CPU],
		}
		for _, c := range []string{Memory, Pids, CPU} {
			if !need[c] {
				continue
			}
			dir := filepath.Join(cs.v1Base[c], name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				cg.Remove()
				return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
			}
			cg.dirs[c] = dir
		}
		cg.lim, cg.memsw = lim, cs.memsw
		if err := cg.applyV1(lim, cs.memsw); err != nil {
			cg.Remove()
			return nil, err
		}
	}
	return cg, nil
}

// Name is the cgroup's name, the same in every hierarchy.
func (cg *Command) Name() string { return cg.name }

// Mode is the mode it was made in.
func (cg *Command) Mode() Mode { return cg.mode }

// Dir is its directory of controller ctrl, "" when it does not use it.
func (cg *Command) Dir(ctrl string) string { return cg.dirs[ctrl] }

// Dirs are its directories, one per controller used (on v2 the one
// directory, once per controller).
func (cg *Command) Dirs() []string {
	var dirs []string
	for _, d := range cg.dirs {
		dirs = append(dirs, d)
	}
	return dirs
}

// Used reports whether it has any directory (on v1, a command without a
// limit to enforce gets none).
func (cg *Command) Used() bool { return len(cg.dirs) > 0 }

// FD is its open v2 directory, for CLONE_INTO_CGROUP (-1 on v1).
func (cg *Command) FD() int { return cg.fd }

func (cg *Command) applyV2(dir string, lim Limits, have map[string]bool) error {
	if lim.MemoryBytes > 0 {
		if err := writeCg(filepath.Join(dir, "memory.max"), strconv.FormatUint(lim.MemoryBytes, 10)); err != nil {
			return err
		}
	}
	// No swap ever: a memory limit that spills into swap is no limit, and
	// swapping is how a sandbox slows the host down. Some kernels lack the
	// file (swap accounting off): then there is nothing to spill into
	// through this cgroup's accounting either.
	swap := filepath.Join(dir, "memory.swap.max")
	if _, err := os.Stat(swap); err == nil || isFakeCgroup(dir) {
		if err := writeCg(swap, "0"); err != nil {
			return err
		}
	}
	if lim.Pids > 0 {
		if err := writeCg(filepath.Join(dir, "pids.max"), strconv.FormatUint(lim.Pids, 10)); err != nil {
			return err
		}
	}
	if lim.CPUQuotaPercent > 0 && have[CPU] {
		q := lim.CPUQuotaPercent * cpuPeriodUS / 100
		if err := writeCg(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", q, cpuPeriodUS)); err != nil {
			return err
		}
	}
	return nil
}

func (cg *Command) applyV1(lim Limits, memsw bool) error {
	if d, ok := cg.dirs[Memory]; ok {
		v := strconv.FormatUint(lim.MemoryBytes, 10)
		if err := writeCg(filepath.Join(d, "memory.limit_in_bytes"), v); err != nil {
			return err
		}
		// memsw (memory+swap) must be set after the memory limit (it may
		// not go below it): equal values mean no swap at all.
		if memsw {
			if err := writeCg(filepath.Join(d, "memory.memsw.limit_in_bytes"), v); err != nil {
				return err
			}
		}
	}
	if d, ok := cg.dirs[Pids]; ok {
		if err := writeCg(filepath.Join(d, "pids.max"), strconv.FormatUint(lim.Pids, 10)); err != nil {
			return err
		}
	}
	if d, ok := cg.dirs[CPU]; ok {
		if err := writeCg(filepath.Join(d, "cpu.cfs_period_us"), strconv.Itoa(cpuPeriodUS)); err != nil {
			return err
		}
		q := lim.CPUQuotaPercent * cpuPeriodUS / 100
		if err := writeCg(filepath.Join(d, "cpu.cfs_quota_us"), strconv.FormatUint(q, 10)); err != nil {
			return err
		}
	}
	return nil
}

// Join moves pid (and so, since it has not forked yet, everything it will
// start) into every v1 hierarchy of the command cgroup.
//
// A command cgroup that vanished between create and join (a v1 hierarchy's
// root is shared by every process of the host, and something outside the
// driver removed an empty directory there: seen on shared machines) is
// made again with the same limits, once: the limits hold either way, and
// the command is not refused for what another process did.
func (cg *Command) Join(pid int) error {
	for c, d := range cg.dirs {
		err := writeCg(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid))
		if errors.Is(err, os.ErrNotExist) && cg.mode == V1 {
			if os.Mkdir(d, 0o755) == nil {
				if err = cg.applyV1(cg.lim, cg.memsw); err == nil {
					err = writeCg(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid))
				}
			}
		}
		if err != nil {
			return fmt.Errorf("join %s cgroup: %w", c, err)
		}
	}
	return nil
}

// PrimeV1 starts the kernel's switch of its cgroup migration lock to the
// writer side ahead of the command's own move, and returns when it is done.
//
// Every write to a v1 cgroup.procs takes the global threadgroup rwsem for
// writing, and the first writer after a quiet spell waits for a whole RCU
// grace period (5-20 ms under load) while the readers' fast path is turned
// off; writers that follow within a grace period of the last one do not
// wait. The driver writes "0" (itself) into its own cgroup of a hierarchy
// the command uses: a move to where it already is, which changes
// nothing but pays the grace period while bwrap starts, so the real move of
// bwrap's child that follows finds the lock already switched. A failed
// write only loses the head start.
func (cs *System) PrimeV1(cg *Command) {
	for _, c := range []string{Pids, Memory, CPU} {
		if _, use := cg.dirs[c]; use && cs.v1Base[c] != "" {
			_ = writeCg(filepath.Join(cs.v1Base[c], "cgroup.procs"), "0")
			return
		}
	}
}

// OOMKilled reports whether the kernel OOM-killed a process of the cgroup.
func (cg *Command) OOMKilled() bool {
	d, ok := cg.dirs[Memory]
	if !ok {
		return false
	}
	file, key := "memory.oom_control", "oom_kill"
	if cg.mode == V2 {
		file = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(d, file))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, _ := strconv.Atoi(f[1])
			return n > 0
		}
	}
	return false
}

// MemoryTooSmallError is a memory limit under which the sandbox could not
// even be set up: the kernel's OOM killer ended it before the program ran.
type MemoryTooSmallError struct{ LimitBytes uint64 }

func (e *MemoryTooSmallError) Error() string {
	// The figures are a hint measured on one host (2 MiB was the least that
	// set up a sandbox running /bin/true, python3 needed 4 MiB), not a
	// promise: what a program needs depends on it and on the host.
	return fmt.Sprintf("the memory limit of %s is too small to start the program: the sandbox was killed for lack of memory while it was being set up "+
		"(hint: a sandbox needs about 2 MiB before the program starts, and the program its own share on top: try tens of MiB or more)", mib(e.LimitBytes))
}

// As lets the error cross the plugin boundary as what it is to the
// caller: a max_memory_mb too small for the program, bad input naming its
// field (invalid_command on the host), not a failure of the sandbox.
func (e *MemoryTooSmallError) As(target any) bool {
	if t, ok := target.(**driverapi.InvalidSpecError); ok {
		*t = &driverapi.InvalidSpecError{Field: "max_memory_mb", Reason: e.Error()}
		return true
	}
	return false
}

func mib(b uint64) string {
	if b%(1<<20) == 0 {
		return strconv.FormatUint(b>>20, 10) + " MiB"
	}
	return strconv.FormatUint(b, 10) + " bytes"
}

// SetupOOM is the error for a setup the memory limit killed, nil when the
// memory cgroup saw no OOM kill (or there is none).
func (cg *Command) SetupOOM(limit uint64) error {
	if cg == nil || limit == 0 || !cg.OOMKilled() {
		return nil
	}
	return &MemoryTooSmallError{LimitBytes: limit}
}

// Remove kills whatever is left in the cgroup and deletes it. By the time
// it runs bwrap is gone, and with it (PID namespace) every descendant; the
// kill is a second line for processes that have not been reaped yet.
func (cg *Command) Remove() {
	if cg == nil {
		return
	}
	if cg.fd >= 0 {
		_ = unix.Close(cg.fd)
		cg.fd = -1
	}
	seen := map[string]bool{}
	for _, d := range cg.dirs {
		if seen[d] {
			continue
		}
		seen[d] = true
		if cg.mode == V2 {
			_ = writeCg(filepath.Join(d, "cgroup.kill"), "1")
		}
		// rmdir fails while the last processes are still exiting (a
		// fraction of a millisecond after bwrap is reaped): poll from
		// 100 µs up, so the common case does not pay a fixed sleep, and
		// give up after about a second.
		wait, deadline := 100*time.Microsecond, time.Now().Add(time.Second)
		for {
			killAll(d)
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			// A fake cgroupfs (tests) holds the files the driver wrote;
			// a real one refuses rmdir while processes are exiting.
			if errors.Is(err, syscall.ENOTEMPTY) && cg.mode == V2 && isFakeCgroup(d) {
				_ = os.RemoveAll(d)
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(wait)
			wait = min(2*wait, 5*time.Millisecond)
		}
	}
}

func isFakeCgroup(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type != unix.CGROUP2_SUPER_MAGIC && st.Type != unix.CGROUP_SUPER_MAGIC
}

func killAll(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// writeCg writes one value to a cgroup control file. O_CREATE is there for
// the fake cgroupfs of tests; a real cgroupfs refuses to create files.
func writeCg(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(value))
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, werr)
	}
	return cerr
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Prefix starts every per-command cgroup's name:
// "aleph-<owner pid>-<owner start time>-<random>".
const Prefix = "aleph-"

// staleAfter is how old an empty per-command cgroup named in the older
// "aleph-<random>" form must be before a driver removes it. Cgroups named
// after their owner are removed as soon as the owner is dead.
const staleAfter = 2 * time.Minute

// Sweep removes the per-command cgroups of drivers that died (kill -9
// skips their cleanup): at once for those whose owning driver process no
// longer exists, its leftover processes killed first; cgroups in the older
// naming once empty and stale. Those of live drivers are never touched.
func (cs *System) Sweep() {
	var bases []string
	if cs.mode == V2 {
		bases = append(bases, cs.v2Base)
	}
	for _, b := range cs.v1Base {
		bases = append(bases, b)
	}
	for _, b := range bases {
		ents, err := os.ReadDir(b)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			if !e.IsDir() || !strings.HasPrefix(name, Prefix) || name == "aleph-driver" {
				continue
			}
			dir := filepath.Join(b, name)
			if pid, start, rest, ok := ownertag.Parse(strings.TrimPrefix(name, Prefix)); ok && rest != "" {
				if ownertag.Gone(pid, start, rest) {
					dead := &Command{name: name, mode: cs.mode, dirs: map[string]string{"": dir}, fd: -1}
					dead.Remove()
				}
				continue
			}
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleAfter {
				_ = os.Remove(dir) // fails unless empty
			}
		}
	}
}

func unwrapPathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
