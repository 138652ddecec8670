//go:build linux

package bwrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Attacks on prepared sandboxes (prepared_linux.go): what a command, or a
// caller's deadline, can do to the hand-over that it cannot do to a
// sandbox built for the command.

// slowHandoverWorkspace is a workspace with many nested repositories: the
// hand-over then makes hundreds of mounts inside, so sandbox-init answers
// it well after a deadline of a millisecond has passed.
func slowHandoverWorkspace(t *testing.T) string {
	t.Helper()
	ws := newWorkspace(t)
	for i := 0; i < 300; i++ {
		if err := os.MkdirAll(filepath.Join(ws, "d"+strconv.Itoa(i), ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// TestPreparedAttackDeadlineDuringHandover: a timeout or a cancel that
// expires while sandbox-init is taking the hand-over ends the sandbox. On
// the old code the driver answered "timed out" (or the context's error)
// and walked away from a sandbox that then ran the command anyway, with no
// timeout, nobody reading its output and its cgroup and lifeline never
// released: the command below wrote its file a second after its 1 ms
// timeout was reported.
func TestPreparedAttackDeadlineDuringHandover(t *testing.T) {
	d := testDriver(t, preparedOpts(PreparedAlways))
	ws := slowHandoverWorkspace(t)
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{
		Capabilities: driverapi.Capabilities{SpawnSubprocess: true}, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctx context.Context, marker string, timeout time.Duration) (driverapi.Exit, error) {
		return d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", "sleep 0.5; echo ran > " + marker},
			Env: pathEnv(), Cwd: ws, Profile: prof, Timeout: timeout, MaxOutputBytes: 1 << 20},
			driverapi.Streams{Stdout: &lockedBuf{}, Stderr: &lockedBuf{}})
	}
	// Positive control: the command writes its marker when given the time.
	if exit, err := run(context.Background(), "control", 20*time.Second); err != nil || exit.ExitCode != 0 || exit.Details["prepared"] != "1" {
		t.Fatalf("control: %v %+v", err, exit)
	}
	if _, err := os.Stat(filepath.Join(ws, "control")); err != nil {
		t.Fatalf("control: %v", err)
	}

	// Three times: the window is the hand-over's mounts, a few ms.
	markers := []string{"after-cancel"}
	for i := 0; i < 3; i++ {
		m := "after-timeout-" + strconv.Itoa(i)
		markers = append(markers, m)
		if exit, err := run(context.Background(), m, time.Millisecond); err != nil || !exit.TimedOut {
			t.Fatalf("1 ms timeout: %v %+v", err, exit)
		}
	}
	// The cancel comes once the driver has made the placeholders of the
	// missing protected entries on the host, just before it sends the
	// hand-over: sandbox-init is then making its mounts.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer cancel()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
			if _, err := os.Lstat(filepath.Join(ws, ".vscode")); err == nil {
				return
			}
		}
	}()
	if _, err := run(ctx, "after-cancel", 20*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // three times the command's sleep
	for _, m := range markers {
		if _, err := os.Stat(filepath.Join(ws, m)); err == nil {
			t.Errorf("the command ran on after its Run answered (%s)", m)
		}
	}
}
