package main

import (
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/hostv1"
)

// `mcp --host` takes a unix:PATH and none of the flags that choose an
// in-process pipeline; each mistake is refused before any serving.
// (--allow-spawn and --allow-net apply, for each call only:
// TestMCPHostBaselineIsForTheCallOnly.)
func TestMCPHostFlags(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"tcp address":  {[]string{"mcp", "--host", "tcp:127.0.0.1:1"}, "unix:PATH"},
		"relative":     {[]string{"mcp", "--host", "s.sock"}, "unix:PATH"},
		"with config":  {[]string{"mcp", "--host", "unix:/x.sock", "--config", "c.toml"}, "--config does not apply with --host"},
		"with driver":  {[]string{"mcp", "--host", "unix:/x.sock", "--driver", "bwrap"}, "--driver does not apply with --host"},
		"bad baseline": {[]string{"mcp", "--host", "unix:/x.sock", "--allow-net", ",,"}, "--allow-net"},
	} {
		r := cli(t, "", false, c.args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want a refusal naming %q", name, r.code, r.stdout, r.stderr, c.want)
		}
	}
}

// The service's denial and approval requests come back as core's values:
// the reason without the message's own prefix (said once), and the
// capabilities asked for.
func TestMCPHostConversions(t *testing.T) {
	de := mcpDeniedFrom(&hostv1.ExecResult{Denied: true, ReasonCode: "hook_denied", Rule: "rm-root",
		Reason: "denied (hook_denied) by hook policy rule rm-root: removes the root"})
	if de.Code != core.ReasonHookDenied || de.Rule != "rm-root" || de.Reason != "removes the root" ||
		strings.Count(de.Error(), "denied (") != 1 {
		t.Fatalf("denial %+v: %q", de, de.Error())
	}
	c := mcpCapsFrom(&hostv1.Capabilities{NetworkMode: "allow_hosts", NetworkHosts: []string{"example.com:443"}, Spawn: true, FsRead: []string{"/data"}})
	if c.Network.Mode != driverapi.NetworkAllowHosts || len(c.Network.Hosts) != 1 || !c.SpawnSubprocess || len(c.FSRead) != 1 {
		t.Fatalf("capabilities %+v", c)
	}
	if c := mcpCapsFrom(&hostv1.Capabilities{NetworkMode: "allow_all"}); c.Network.Mode != driverapi.NetworkAllowAll {
		t.Fatalf("allow_all: %+v", c)
	}
	if c := mcpCapsFrom(nil); c.Network.Mode != driverapi.NetworkNone || c.SpawnSubprocess {
		t.Fatalf("none: %+v", c)
	}
}
