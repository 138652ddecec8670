package client

import (
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// The service's denial and approval requests come back as core's values:
// the reason without the message's own prefix (said once), and the
// capabilities asked for.
func TestConversions(t *testing.T) {
	de := DeniedFrom(&hostv1.ExecResult{Denied: true, ReasonCode: "hook_denied", Rule: "rm-root",
		Reason: "denied (hook_denied) by hook policy rule rm-root: removes the root"})
	if de.Code != core.ReasonHookDenied || de.Rule != "rm-root" || de.Reason != "removes the root" ||
		strings.Count(de.Error(), "denied (") != 1 {
		t.Fatalf("denial %+v: %q", de, de.Error())
	}
	c := CapsFrom(&hostv1.Capabilities{NetworkMode: "allow_hosts", NetworkHosts: []string{"example.com:443"}, Spawn: true, FsRead: []string{"/data"}})
	if c.Network.Mode != driverapi.NetworkAllowHosts || len(c.Network.Hosts) != 1 || !c.SpawnSubprocess || len(c.FSRead) != 1 {
		t.Fatalf("capabilities %+v", c)
	}
	if c := CapsFrom(&hostv1.Capabilities{NetworkMode: "allow_all"}); c.Network.Mode != driverapi.NetworkAllowAll {
		t.Fatalf("allow_all: %+v", c)
	}
	if c := CapsFrom(nil); c.Network.Mode != driverapi.NetworkNone || c.SpawnSubprocess {
		t.Fatalf("none: %+v", c)
	}
}

// A command reaches the service as it was validated: a host list one host
// per entry (net_hosts, net left empty), none and all in net; a yes for
// the call only is sent as once, a plain yes without it.
func TestExecuteRequestAndAnswer(t *testing.T) {
	hosts := ExecuteRequest(core.Command{SessionID: "s", Program: "/bin/true",
		Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"a.example", "b.example:80"}}}})
	if hosts.GetNet() != "" || len(hosts.GetNetHosts()) != 2 || hosts.GetNetHosts()[1] != "b.example:80" || !hosts.GetAnswerApprovals() {
		t.Fatalf("hosts: %+v", hosts)
	}
	if r := ExecuteRequest(core.Command{Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}}); r.GetNet() != "all" || len(r.GetNetHosts()) != 0 {
		t.Fatalf("all: %+v", r)
	}
	if r := ExecuteRequest(core.Command{}); r.GetNet() != "none" {
		t.Fatalf("none: %+v", r)
	}
	for o, want := range map[driverapi.ApprovalOutcome][2]bool{
		driverapi.ApprovalApprovedOnce: {true, true},
		driverapi.ApprovalApproved:     {true, false},
		driverapi.ApprovalDenied:       {false, false},
		driverapi.ApprovalTimeout:      {false, false},
	} {
		if a := Answer("id", o); a.GetApproved() != want[0] || a.GetOnce() != want[1] || a.GetId() != "id" {
			t.Errorf("%v: %+v", o, a)
		}
	}
}
