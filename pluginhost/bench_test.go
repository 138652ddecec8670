package pluginhost

import (
	"context"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// BenchmarkExecuteRealPlugin is the same round trip with the fake driver in
// a real plugin process (go-plugin over a unix socket with mTLS).
func BenchmarkExecuteRealPlugin(b *testing.B) {
	host := newPluginHost(b)
	sb, err := core.NewWorkspaceSandbox(testConfig(b), core.WithDriver(host), core.WithAuditSink(&memSink{}))
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	ctx := core.WithSession(context.Background(), "bench")
	cmd := core.Command{Program: "echo", Args: []string{"hi"}}
	if _, err := sb.Execute(ctx, cmd); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := sb.Execute(ctx, cmd); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDriverHostForgetNeverLaunches(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plugin processes")
	}
	host := newPluginHost(t)
	if err := host.ForgetSession(context.Background(), "s1"); err != nil || host.Pid() != 0 {
		t.Fatalf("ForgetSession on a host with no driver running: %v, pid %d", err, host.Pid())
	}
}
