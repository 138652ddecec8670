package service

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// net_hosts carries the host list one host per entry: the command gets
// exactly those hosts. A host the proxy would refuse, and net given
// beside net_hosts, are invalid_argument naming the field, and nothing
// runs. Control: net in the CLI's syntax still works.
func TestExecuteNetHosts(t *testing.T) {
	_, h, hs := newLimitServer(t, core.ServeLimits{})
	if code, msg, _ := execute(t, hs.URL, `{"session":"s","argv":["/bin/true"],"netHosts":["a.example","*.example.org:443"]}`); code != "" {
		t.Fatalf("net_hosts: %q %q", code, msg)
	}
	if h.runs() != 1 {
		t.Fatalf("net_hosts: %d runs", h.runs())
	}
	if n := h.executed[0].Capabilities.Network; n.Mode != driverapi.NetworkAllowHosts || !slices.Equal(n.Hosts, []string{"a.example", "*.example.org:443"}) {
		t.Fatalf("net_hosts: network %+v", n)
	}
	for name, msg := range map[string]string{
		"net_hosts[1]": `{"session":"s","argv":["/bin/true"],"netHosts":["a.example","exa mple.com"]}`,
		"net":          `{"session":"s","argv":["/bin/true"],"net":"all","netHosts":["a.example"]}`,
	} {
		code, text, _ := execute(t, hs.URL, msg)
		if code != "invalid_argument" || !strings.HasPrefix(text, name+":") {
			t.Errorf("%s: %q %q", name, code, text)
		}
	}
	if code, msg, _ := execute(t, hs.URL, `{"session":"s","argv":["/bin/true"],"net":"b.example,c.example:80"}`); code != "" {
		t.Fatalf("net control: %q %q", code, msg)
	}
	if h.runs() != 2 {
		t.Fatalf("%d runs, want the two good requests only", h.runs())
	}
	if n := h.executed[1].Capabilities.Network; !slices.Equal(n.Hosts, []string{"b.example", "c.example:80"}) {
		t.Fatalf("net control: %+v", n)
	}
}

// An Approve with once is a yes for that command only
// (ApprovalApprovedOnce, which the pipeline keeps no grant of); without
// once it is the plain yes the pipeline keeps, and not approved is no.
func TestBrokerApproveOnce(t *testing.T) {
	for _, c := range []struct {
		approved, once bool
		want           driverapi.ApprovalOutcome
	}{
		{true, true, driverapi.ApprovalApprovedOnce},
		{true, false, driverapi.ApprovalApproved},
		{false, true, driverapi.ApprovalDenied},
	} {
		b := NewBroker(false, nil)
		asked := make(chan *hostv1.ApprovalRequest, 1)
		ctx := withOwnApprover(context.Background(), func(r *hostv1.ApprovalRequest) error { asked <- r; return nil })
		got := make(chan driverapi.ApprovalOutcome, 1)
		go func() {
			o, _ := b.RequestApproval(ctx, driverapi.ApprovalRequest{SessionID: "s", Program: "/bin/true"})
			got <- o
		}()
		r := <-asked
		if !b.answer(r.GetId(), c.approved, c.once) {
			t.Fatalf("%+v: the request was not pending", c)
		}
		if o := <-got; o != c.want {
			t.Errorf("approved %v once %v: %v, want %v", c.approved, c.once, o, c.want)
		}
	}
}
