package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	"github.com/aleph-sandbox/aleph-sandbox/service/client"
)

// Run serves the service on its socket once Ready is called: a command
// sent through the Go client runs on the runtime Run assembled (here over
// a stand-in driver) and its output comes back; a signal stops Run, which
// returns nil and leaves no socket behind. A second Run on the same
// socket is refused as in use while the first serves.
func TestRunServesUntilSignalled(t *testing.T) {
	fake := &drivertest.FakeDriver{Stdout: []byte("from the driver\n")}
	r := startRun(t, fake)
	cfg, sock, sigs := r.cfg, r.sock, r.sigs

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := client.NewPipeline(sock, nil).Execute(ctx, core.Command{SessionID: "s", Program: "/bin/echo", Args: []string{"x"}})
	if err != nil || string(out.Stdout) != "from the driver\n" || fake.Runs() != 1 {
		t.Fatalf("through the service: %+v, %v (driver runs %d)", out, err, fake.Runs())
	}

	second := service.Run(ctx, service.Config{Sandbox: cfg, Sockets: []string{sock},
		RuntimeOptions: []alephsandbox.Option{alephsandbox.WithDriver(drivertest.Connect(t, &drivertest.FakeDriver{}))}})
	var inUse *service.InUseError
	if !errors.As(second, &inUse) {
		t.Fatalf("a second Run on the socket: %v, want *InUseError", second)
	}

	sigs <- syscall.SIGTERM
	r.stopped(t, "after the signal")
}

// blockingDriver holds a run of /bin/block until release is closed.
type blockingDriver struct {
	drivertest.FakeDriver
	entered chan struct{}
	release chan struct{}
}

func (d *blockingDriver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	if spec.Program == "/bin/block" {
		d.entered <- struct{}{}
		select {
		case <-d.release:
		case <-ctx.Done():
			return driverapi.Exit{}, ctx.Err()
		}
	}
	return d.FakeDriver.Run(ctx, spec, streams)
}

// A stopping Run drains: while a command of a held session runs, the
// session's next command is still served and a new session is refused
// with the draining reason; once nothing runs, Run ends and leaves no
// socket behind.
func TestRunDrainsBeforeItStops(t *testing.T) {
	drv := &blockingDriver{entered: make(chan struct{}, 1), release: make(chan struct{})}
	r := startRun(t, drv)
	sock, sigs, done := r.sock, r.sigs, r.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := client.NewPipeline(sock, nil)
	if _, err := p.Execute(ctx, core.Command{SessionID: "held", Program: "/bin/true"}); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := p.Execute(ctx, core.Command{SessionID: "held", Program: "/bin/block"})
		blocked <- err
	}()
	<-drv.entered
	sigs <- syscall.SIGTERM
	// The signal is taken asynchronously: a new session is refused once
	// the drain began.
	var err error
	for range 200 {
		if _, err = p.Execute(ctx, core.Command{SessionID: "new-one", Program: "/bin/true"}); err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if client.Reason(err) != service.ReasonDraining {
		t.Fatalf("a new session while draining: %v (reason %q)", err, client.Reason(err))
	}
	runs := drv.Runs()
	if _, err := p.Execute(ctx, core.Command{SessionID: "held", Program: "/bin/true"}); err != nil {
		t.Fatalf("the held session's next command while draining: %v", err)
	}
	if drv.Runs() != runs+1 {
		t.Fatalf("driver runs %d, want %d", drv.Runs(), runs+1)
	}
	select {
	case err := <-done:
		t.Fatalf("Run ended while a command ran: %v", err)
	default:
	}
	close(drv.release)
	if err := <-blocked; err != nil {
		t.Fatalf("the command running at the signal: %v", err)
	}
	r.stopped(t, "once nothing ran")
}

// running is a Run serving a stand-in driver on a private socket.
type running struct {
	cfg  core.Config
	sock string
	sigs chan os.Signal
	done chan error
}

// startRun starts Run over d and returns once it serves.
func startRun(t *testing.T, d driverapi.Driver) *running {
	t.Helper()
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	r := &running{cfg: core.DefaultConfig(), sock: filepath.Join(t.TempDir(), "run", "s.sock"),
		sigs: make(chan os.Signal, 2), done: make(chan error, 1)}
	r.cfg.Sandbox.WorkspaceRoot = filepath.Join(t.TempDir(), "ws")
	r.cfg.Sandbox.AuditLog = ""
	ready := make(chan struct{})
	conn := drivertest.Connect(t, d)
	go func() {
		r.done <- service.Run(context.Background(), service.Config{Sandbox: r.cfg, Sockets: []string{r.sock}, Signals: r.sigs,
			Ready: func() { close(ready) }, RuntimeOptions: []alephsandbox.Option{alephsandbox.WithDriver(conn)}})
	}()
	select {
	case <-ready:
	case err := <-r.done:
		t.Fatalf("Run returned before serving: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("Run never became ready")
	}
	return r
}

// stopped waits for Run to return nil and checks it left no socket.
func (r *running) stopped(t *testing.T, when string) {
	t.Helper()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run %s: %v", when, err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("Run did not stop %s", when)
	}
	if _, err := os.Stat(r.sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket is left behind: %v", err)
	}
}
