package service

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// Capabilities says the service's defaults: the time limit, and the
// output budget of a request naming none, which is the ceiling when the
// configured budget is above it (and the budget when below: the control).
func TestCapabilitiesSayDefaults(t *testing.T) {
	for _, tc := range []struct{ budget, ceiling, want int64 }{{5000, 1000, 1000}, {500, 1000, 500}} {
		_, _, hs := newLimitServer(t, core.ServeLimits{DefaultTimeout: 90 * time.Second, MaxOutputBytes: tc.ceiling, DefaultOutputBytes: tc.budget})
		c := hostv1connect.NewServiceClient(hs.Client(), hs.URL, connect.WithProtoJSON())
		r, err := c.Capabilities(context.Background(), connect.NewRequest(&hostv1.CapabilitiesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if m := r.Msg; m.GetDefaultTimeoutMs() != 90000 || m.GetMaxOutputBytes() != tc.ceiling || m.GetDefaultMaxOutputBytes() != tc.want {
			t.Errorf("budget %d ceiling %d: %+v", tc.budget, tc.ceiling, m)
		}
	}
}

// A process's usage is counted in /metrics when it ends, as an Execute
// call's is: before it ran, the RSS histogram counts none.
func TestProcessUsageMetered(t *testing.T) {
	srv, _, hs := newLimitServer(t, core.ServeLimits{})
	ms := httptest.NewServer(srv.MetricsHandler())
	t.Cleanup(ms.Close)
	count := func() string {
		resp, err := ms.Client().Get(ms.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 1<<16)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(line, "aleph_sandbox_command_max_rss_bytes_count ") {
				return strings.TrimPrefix(line, "aleph_sandbox_command_max_rss_bytes_count ")
			}
		}
		t.Fatalf("no rss count in:\n%s", b.String())
		return ""
	}
	if got := count(); got != "0" {
		t.Fatalf("before: %s", got)
	}
	c := hostv1connect.NewServiceClient(hs.Client(), hs.URL, connect.WithProtoJSON())
	ctx := context.Background()
	st, err := c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{Command: &hostv1.ExecuteRequest{Session: "s", Argv: []string{"/bin/true"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitProcess(ctx, connect.NewRequest(&hostv1.WaitProcessRequest{Id: st.Msg.GetId()})); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != "1" {
		t.Fatalf("after one process: %s", got)
	}
}
