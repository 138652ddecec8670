package main

import (
	"os"
	"path/filepath"
	"strings"
)

// benchServePrefix names the temporary directory of bench's private serve.
const benchServePrefix = "aleph-bench-serve-"

// benchOwnerFile, inside that directory, names the bench that made it:
// its pid and its start time (processIdentity), so that a later bench
// can tell a directory whose bench was killed (SIGKILL runs no cleanup;
// the private serve it started dies of the parent-death signal, leaving
// its directory) from one a running bench still uses, even when the pid
// has been reused since.
const benchOwnerFile = "owner"

// markBenchDir records this process as dir's owner.
func markBenchDir(dir string) error {
	id, ok := processIdentity(os.Getpid())
	if !ok {
		return nil // no way to tell owners apart here: nothing is swept
	}
	return os.WriteFile(filepath.Join(dir, benchOwnerFile), []byte(id+"\n"), 0o600)
}

// sweepBenchDirs removes the private serve directories under tmp that
// an earlier bench left when it was killed: only directories of this
// user whose owner file names a process that no longer runs. A
// directory without an owner file (or one that cannot be read) is kept:
// it may be another program's, or a bench's that has not written it
// yet.
func sweepBenchDirs(tmp string) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), benchServePrefix) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		if !ownedByMe(dir) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, benchOwnerFile))
		if err != nil {
			continue
		}
		id := strings.TrimSpace(string(b))
		pid, _, ok := strings.Cut(id, " ")
		if !ok {
			continue
		}
		if live, known := processIdentityOf(pid); known && live == id {
			continue // its bench still runs
		}
		_ = os.RemoveAll(dir)
	}
}
