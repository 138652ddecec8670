//go:build linux

// Package ownertag names a driver process so that a later driver can tell
// whether it is still alive, and judges such names: the cgroups, journal
// records and janitor files a driver leaves carry its tag, and are removed
// by another driver only once their owner is surely dead.
package ownertag

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// An owner tag names a driver process so that a later driver can tell
// whether it is still alive: its pid and its start time (clock ticks since
// boot, /proc/PID/stat field 22). A pid alone is reused; the pair is not.

// StartTime reads the start time of pid, or fails when it is gone.
func StartTime(pid int) (uint64, error) {
	st, _, err := procStat(pid)
	return st, err
}

// procStat reads the start time and state letter of pid.
func procStat(pid int) (uint64, string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses itself: count fields after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 {
		return 0, "", fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	return st, f[0], err
}

// Self is "<pid>-<start time>-p<PID namespace inode>" of this
// process. A pid and a start time mean something only in the PID
// namespace they were read in: a driver in a container (or in any other
// PID namespace) sharing this host's cgroups and state directory would
// read another driver's pid as some unrelated or absent process of its own
// and take the owner for dead. The namespace part lets it tell that it
// cannot judge (see Gone).
func Self() string {
	pid := os.Getpid()
	st, _ := StartTime(pid)
	return strconv.Itoa(pid) + "-" + strconv.FormatUint(st, 10) + "-" + NamespaceTag()
}

// NamespaceTag is "p<inode>" of this process's PID namespace, or "p0"
// when it cannot be read.
func NamespaceTag() string {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return "p0"
	}
	return "p" + strconv.FormatUint(st.Ino, 10)
}

// Gone reports whether the owner a tag names is surely dead: its
// namespace part (the start of rest, in tags Self made) is this
// process's own, and the process is gone. A tag from another PID
// namespace is never judged dead; one without a namespace part (an older
// driver's) is judged as before.
func Gone(pid int, start uint64, rest string) bool {
	if strings.HasPrefix(rest, "p") {
		ns, _, _ := strings.Cut(rest, "-")
		if _, err := strconv.ParseUint(ns[1:], 10, 64); err == nil && ns != NamespaceTag() {
			return false
		}
	}
	return !Alive(pid, start)
}

// Parse splits "<pid>-<start>" off the front of s and returns the
// rest (after a '-'), or ok false.
func Parse(s string) (pid int, start uint64, rest string, ok bool) {
	p, after, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, "", false
	}
	st, rest, _ := strings.Cut(after, "-")
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(st, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, 0, "", false
	}
	return pid, start, rest, true
}

// Alive reports whether the process the tag names still runs. A
// process that cannot be inspected counts as alive: only a sure death lets
// its leftovers be removed.
// A zombie is dead: it has finished exiting (for the init of a PID
// namespace, that includes the death of every process in it).
func Alive(pid int, start uint64) bool {
	st, state, err := procStat(pid)
	if err != nil {
		return !os.IsNotExist(err)
	}
	return st == start && state != "Z" && state != "X"
}
