//go:build unix

package driverapi_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// hostMain is the "host" mode of the test binary: it launches a driver
// plugin (the test binary again), prints the plugin's pid, and waits to be
// killed.
func hostMain() {
	exe, _ := os.Executable()
	proc, err := driverapi.LaunchDriver(context.Background(), driverapi.LaunchConfig{
		Path: exe, Env: []string{"ALEPH_DRIVERAPI_TEST_PLUGIN=driver"},
	})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("plugin", proc.Pid())
	select {}
}

// A host killed with SIGKILL cannot clean up; the plugin must notice on its
// own (the lifeline pipe) and exit, or it would linger forever.
func TestPluginDiesWithItsHost(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	host := exec.Command(exe)
	host.Env = append(os.Environ(), "ALEPH_DRIVERAPI_TEST_PLUGIN=host", "TMPDIR="+tmp)
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer host.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("host said nothing: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "plugin" {
		t.Fatalf("host: %q", line)
	}
	pid, _ := strconv.Atoi(f[1])
	if !alive(pid) {
		t.Fatalf("plugin %d not running while its host lives", pid)
	}
	_ = host.Process.Signal(syscall.SIGKILL)
	_ = host.Wait()
	// The plugin was the host's child; now orphaned, init reaps it.
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) && !isZombie(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("plugin %d outlived its SIGKILLed host", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The dead host could not remove the plugin's socket directory; the
	// plugin did, on its way out.
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("left behind by the plugin of a dead host: %v", ents)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// Nothing of a launch stays on disk: the plugin's socket lives in a private
// directory that is gone after Kill, after a failed launch, and after the
// host dies.
func TestNoSocketLeftBehind(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	leftovers := func() []string {
		ents, _ := os.ReadDir(tmp)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	proc, err := driverapi.LaunchDriver(context.Background(), selfPlugin(t, "driver"))
	if err != nil {
		t.Fatal(err)
	}
	if len(leftovers()) == 0 {
		t.Fatal("control: a running plugin has its socket directory under TMPDIR")
	}
	proc.Kill()
	if l := leftovers(); len(l) != 0 {
		t.Fatalf("left after Kill: %v", l)
	}
	bad := selfPlugin(t, "driver")
	bad.SHA256 = strings.Repeat("00", 32)
	if _, err := driverapi.LaunchDriver(context.Background(), bad); err == nil {
		t.Fatal("a wrong pin must refuse")
	}
	if l := leftovers(); len(l) != 0 {
		t.Fatalf("left after a refused launch: %v", l)
	}
}
