package core

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// forgetDriver records the sessions it is told to forget.
type forgetDriver struct {
	drivertest.FakeDriver
	mu     sync.Mutex
	forgot []string
}

func (d *forgetDriver) ForgetSession(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forgot = append(d.forgot, id)
	return nil
}

func TestForgetSessionTellsTheDriver(t *testing.T) {
	drv := &forgetDriver{}
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drv), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if _, err := sb.Execute(WithSession(context.Background(), "s1"), Command{Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	sb.ForgetSession("s1")
	drv.mu.Lock()
	got := slices.Clone(drv.forgot)
	drv.mu.Unlock()
	if !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("the driver was told to forget %v, want [s1]", got)
	}
}
