package pluginhost

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// fakeDriverEnv makes the test binary serve drivertest.FakeDriver as a real
// plugin process, so DriverHost can be tested against a process that can
// crash.
const fakeDriverEnv = "ALEPH_TEST_FAKE_DRIVER"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeDriverEnv) {
	case "1":
		driverapi.Serve(&drivertest.FakeDriver{})
		os.Exit(0)
	case "config":
		driverapi.Serve(&configFake{})
		os.Exit(0)
	case "gate", "hangcaps":
		startLog()
		if os.Getenv(fakeDriverEnv) == "hangcaps" {
			driverapi.Serve(&hangingCaps{})
			os.Exit(0)
		}
		// Never handshakes: waits for the test to open the gate, then
		// fails as a broken driver would.
		for {
			if _, err := os.Stat(os.Getenv("ALEPH_TEST_GATE")); err == nil {
				os.Exit(3)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	os.Exit(m.Run())
}

// startLog appends this plugin process's pid to $ALEPH_TEST_LAUNCH_LOG, one
// line per start, for tests that count launches.
func startLog() {
	f, err := os.OpenFile(os.Getenv("ALEPH_TEST_LAUNCH_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		os.Exit(4)
	}
	_, _ = f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	_ = f.Close()
}

// hangingCaps completes its handshake and then never answers Capabilities.
type hangingCaps struct{ drivertest.FakeDriver }

func (*hangingCaps) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	<-ctx.Done()
	select {} // as a wedged driver: not even the host's cancellation ends it
}

// memSink keeps audit records in memory.
type memSink struct {
	mu   sync.Mutex
	recs []core.AuditRecord
}

func (m *memSink) Record(_ context.Context, r core.AuditRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, r)
	return nil
}

func (m *memSink) all() []core.AuditRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]core.AuditRecord(nil), m.recs...)
}

func testConfig(t testing.TB) core.Config {
	cfg := core.DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = t.TempDir()
	cfg.Sandbox.AuditLog = ""
	return cfg
}

func (m *memSink) last(t *testing.T) core.AuditRecord {
	t.Helper()
	all := m.all()
	if len(all) == 0 {
		t.Fatal("no audit record")
	}
	return all[len(all)-1]
}
