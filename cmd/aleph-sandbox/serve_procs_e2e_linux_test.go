//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// readProc reads a process's output until it holds want (or it ends).
func readProc(t *testing.T, c hostv1connect.ServiceClient, id, want string) string {
	t.Helper()
	var all []byte
	var off int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := c.ReadProcess(context.Background(), connect.NewRequest(&hostv1.ReadProcessRequest{Id: id, Offset: off, WaitSeconds: 1}))
		if err != nil {
			t.Fatal(err)
		}
		all, off = append(all, r.Msg.GetData()...), r.Msg.GetNextOffset()
		if bytes.Contains(all, []byte(want)) {
			return string(all)
		}
		if r.Msg.GetExited() || time.Now().After(deadline) {
			t.Fatalf("never saw %q in %q (exited %v, result %+v)", want, all, r.Msg.GetExited(), r.Msg.GetResult())
		}
	}
}

// hostProcWithArg reports whether a process whose command line holds arg
// runs on the host (the sandbox's processes are the host's, in namespaces).
func hostProcWithArg(arg string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte("\x00"+arg+"\x00")) && !bytes.Contains(b, []byte("-c\x00")) {
			return true
		}
	}
	return false
}

func TestServeProcesses(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	srv := h.start(t, sock, "")
	c := client(sock)
	ctx := context.Background()

	t.Run("Process cat round trip through streamed stdin", func(t *testing.T) {
		st, err := c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{
			Command: &hostv1.ExecuteRequest{Session: "p1", Argv: []string{"/bin/cat"}}}))
		if err != nil {
			t.Fatalf("%v\n%s", err, srv.stderr)
		}
		id := st.Msg.GetId()
		w, err := c.WriteProcess(ctx, connect.NewRequest(&hostv1.WriteProcessRequest{Id: id, Data: []byte("hello\n")}))
		if err != nil || w.Msg.GetWritten() != 6 {
			t.Fatalf("write %v %v", w, err)
		}
		readProc(t, c, id, "hello\n")
		if l, err := c.ListProcesses(ctx, connect.NewRequest(&hostv1.ListProcessesRequest{Session: "p1"})); err != nil ||
			len(l.Msg.GetProcesses()) != 1 || l.Msg.GetProcesses()[0].GetId() != id || l.Msg.GetProcesses()[0].GetExited() {
			t.Fatalf("list %v %v", l, err)
		}
		if _, err := c.CloseProcessStdin(ctx, connect.NewRequest(&hostv1.CloseProcessStdinRequest{Id: id})); err != nil {
			t.Fatal(err)
		}
		r, err := c.WaitProcess(ctx, connect.NewRequest(&hostv1.WaitProcessRequest{Id: id}))
		if err != nil || r.Msg.GetResult().GetExitCode() != 0 || r.Msg.GetResult().GetCommandId() == "" {
			t.Fatalf("wait %v %v", r, err)
		}
		// Waited for, it is gone: a typed NotFound.
		_, err = c.ReadProcess(ctx, connect.NewRequest(&hostv1.ReadProcessRequest{Id: id}))
		if connect.CodeOf(err) != connect.CodeNotFound || procDetail(err) != service.ReasonProcessUnknown {
			t.Fatalf("read after wait: %v", err)
		}
	})

	t.Run("Process outlives the call and connection that started it", func(t *testing.T) {
		starter := unixHTTP(sock, false)
		sc := hostv1connect.NewServiceClient(starter, "http://aleph", connect.WithProtoJSON())
		st, err := sc.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{
			Command: &hostv1.ExecuteRequest{Session: "p2", Argv: []string{"/bin/sh", "-c", "read x; echo got:$x"}}}))
		if err != nil {
			t.Fatal(err)
		}
		starter.CloseIdleConnections()
		time.Sleep(300 * time.Millisecond) // let the first connection's end reach the server
		id := st.Msg.GetId()
		if _, err := c.WriteProcess(ctx, connect.NewRequest(&hostv1.WriteProcessRequest{Id: id, Data: []byte("later\n")})); err != nil {
			t.Fatal(err)
		}
		readProc(t, c, id, "got:later\n")
		r, err := c.WaitProcess(ctx, connect.NewRequest(&hostv1.WaitProcessRequest{Id: id}))
		if err != nil || r.Msg.GetResult().GetExitCode() != 0 {
			t.Fatalf("wait %v %v", r, err)
		}
	})

	t.Run("Process killed when its session is forgotten", func(t *testing.T) {
		const mark = "4711.25"
		st, err := c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{
			Command: &hostv1.ExecuteRequest{Session: "p3", Argv: []string{"/bin/sh", "-c", "echo up; exec sleep " + mark}}}))
		if err != nil {
			t.Fatal(err)
		}
		id := st.Msg.GetId()
		readProc(t, c, id, "up\n")
		// Positive control: it really runs, on the host's process table.
		deadline := time.Now().Add(10 * time.Second)
		for !hostProcWithArg(mark) {
			if time.Now().After(deadline) {
				t.Fatal("the started sleep is not running")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Forget{
			Forget: &hostv1.ForgetSession{Session: "p3"}}})); err != nil {
			t.Fatal(err)
		}
		// Forget has ended the process; its tree is gone moments later (the
		// driver's teardown may still be reaping it under load).
		gone := time.Now().Add(10 * time.Second)
		for hostProcWithArg(mark) {
			if time.Now().After(gone) {
				t.Fatal("the forgotten session's process still runs")
			}
			time.Sleep(20 * time.Millisecond)
		}
		_, err = c.ReadProcess(ctx, connect.NewRequest(&hostv1.ReadProcessRequest{Id: id}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("read after forget: %v", err)
		}
	})

	// Last: it stops the service.
	defer t.Run("Process killed when the service stops", func(t *testing.T) {
		const mark = "4712.25"
		st, err := c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{
			Command: &hostv1.ExecuteRequest{Session: "p5", Argv: []string{"/bin/sh", "-c", "echo up; exec sleep " + mark}}}))
		if err != nil {
			t.Fatal(err)
		}
		readProc(t, c, st.Msg.GetId(), "up\n")
		deadline := time.Now().Add(10 * time.Second)
		for !hostProcWithArg(mark) {
			if time.Now().After(deadline) {
				t.Fatal("the started sleep is not running")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-srv.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("serve did not stop\n%s", srv.stderr)
		}
		// Killed with the driver; under load its last moments (the PID
		// namespace's teardown) may outlast serve's exit by a little.
		for end := time.Now().Add(5 * time.Second); hostProcWithArg(mark); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("a process outlived the service by 5 s\n%s", srv.stderr)
			}
		}
	})

	t.Run("Process calls with bad input are typed", func(t *testing.T) {
		_, err := c.SignalProcess(ctx, connect.NewRequest(&hostv1.SignalProcessRequest{Id: "proc-nope", Signal: "INT"}))
		if connect.CodeOf(err) != connect.CodeNotFound || procDetail(err) != service.ReasonProcessUnknown {
			t.Fatalf("unknown id: %v", err)
		}
		_, err = c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{
			Command: &hostv1.ExecuteRequest{Session: "p4", Argv: []string{"/bin/cat"}, Stdin: []byte("x")}}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("stdin buffer: %v", err)
		}
		_, err = c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{
			Command: &hostv1.ExecuteRequest{Session: "p4", Argv: []string{"/bin/cat"}}, Tty: true}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "rows") {
			t.Fatalf("tty without a size: %v", err)
		}
	})
}

func procDetail(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*hostv1.ErrorDetail); ok {
				return ed.GetReasonCode()
			}
		}
	}
	return ""
}
