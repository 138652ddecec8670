package bwrap

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// TestForgetSessionWaitsForItsRuns: a session's command cancelled by the
// host and forgotten at once has left nothing in the workspace when
// ForgetSession returns: the driver waits for the run's clean-up (its
// placeholders removed) before answering, so a host that deletes the
// workspace next does not race with it. The control: while the command
// runs, its placeholders are in the workspace (so their removal is what
// the wait covers), and the command really ran (its file).
func TestForgetSessionWaitsForItsRuns(t *testing.T) {
	d := testDriver(t, options{})
	for i := range 3 {
		ws := newWorkspace(t)
		session := "forget-wait-" + string(rune('a'+i))
		before := listing(t, ws)
		ctx, cancel := context.WithCancel(context.Background())
		prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws,
			Capabilities: driverapi.Capabilities{SpawnSubprocess: true}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			var out, errb bytes.Buffer
			_, err := d.Run(ctx, driverapi.RunSpec{
				Program: "/bin/sh", Args: []string{"-c", "echo ran > ran; sleep 60"},
				Env: []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}}, Cwd: ws, Profile: prof,
				Timeout: 90 * time.Second, MaxOutputBytes: 1 << 20, CommandID: t.Name(), SessionID: session,
			}, driverapi.Streams{Stdout: &out, Stderr: &errb})
			done <- err
		}()
		// The control: the command runs (its file) with its placeholders
		// in the workspace.
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, errRan := os.Lstat(filepath.Join(ws, "ran"))
			_, errGit := os.Lstat(filepath.Join(ws, ".git"))
			if errRan == nil && errGit == nil {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatal("control: the command's file and its placeholders did not both appear in the workspace")
			}
			time.Sleep(2 * time.Millisecond)
		}
		cancel()
		fctx, fcancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := d.ForgetSession(fctx, session); err != nil {
			t.Fatal(err)
		}
		fcancel()
		if err := os.Remove(filepath.Join(ws, "ran")); err != nil {
			t.Fatalf("the command's own file: %v", err)
		}
		sameListing(t, "when ForgetSession returned", before, listing(t, ws))
		if err := <-done; err == nil {
			t.Error("the cancelled command reported no error")
		}
	}
}
