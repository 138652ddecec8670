//go:build linux

package ownertag

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// A tag names its process until that process is gone; a tag from another
// PID namespace is never taken for dead.
func TestTagNamesItsOwner(t *testing.T) {
	pid, start, rest, ok := Parse(Self())
	if !ok || pid != os.Getpid() || rest != NamespaceTag() {
		t.Fatalf("Parse(Self()) = %d %d %q %v", pid, start, rest, ok)
	}
	if Gone(pid, start, rest) {
		t.Fatal("this process is taken for dead")
	}
	c := exec.Command("/bin/true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	cstart, err := StartTime(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%d-%d-%s", c.Process.Pid, cstart, NamespaceTag())
	cpid, cst, crest, ok := Parse(tag)
	if !ok || cpid != c.Process.Pid || cst != cstart {
		t.Fatalf("control: Parse(%q) = %d %d %v", tag, cpid, cst, ok)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if !Gone(cpid, cst, crest) {
		t.Fatalf("the reaped child %d is not taken for dead", cpid)
	}
	// The same pid and start time tagged in another PID namespace: not
	// judged here.
	if Gone(cpid, cst, "p1") {
		t.Fatal("a tag of another PID namespace was taken for dead")
	}
	for _, bad := range []string{"", "x-1", "1", "0-5-p1", "12-x-p1"} {
		if _, _, _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
