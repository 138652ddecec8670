// Package cgrouptest lays out stand-in cgroup filesystems for the tests of
// the bwrap driver and its cgroup package.
package cgrouptest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FakeV2 lays out a cgroup v2 filesystem whose driver cgroup
// (user.slice/svc) holds a process, pid 4242 (so delegation must move the
// driver into a leaf), and the driver's /proc/self/cgroup naming it.
func FakeV2(t testing.TB) (root, selfFile string) {
	t.Helper()
	root = t.TempDir()
	own := filepath.Join(root, "user.slice", "svc")
	if err := os.MkdirAll(own, 0o755); err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{
		filepath.Join(root, "cgroup.controllers"):    "cpuset cpu io memory hugetlb pids rdma misc",
		filepath.Join(own, "cgroup.controllers"):     "cpu memory pids",
		filepath.Join(own, "cgroup.procs"):           "4242\n",
		filepath.Join(own, "cgroup.subtree_control"): "",
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	selfFile = filepath.Join(t.TempDir(), "cgroup")
	if err := os.WriteFile(selfFile, []byte("0::/user.slice/svc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, selfFile
}

// ReadTrim is the content of the file p without surrounding space.
func ReadTrim(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
