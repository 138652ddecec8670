package alephsandbox_test

import (
	"errors"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Every malformed request is refused with a RequestError naming the
// field as the service's protocol names it; a well-formed one becomes the
// command the pipeline runs, its paths absolute and clean.
func TestRequestCommand(t *testing.T) {
	good := alephsandbox.Request{Session: "s", Argv: []string{"/bin/echo", "x"}}
	for name, tc := range map[string]struct {
		edit  func(*alephsandbox.Request)
		field string
	}{
		"no session":         {func(r *alephsandbox.Request) { r.Session = "" }, "session"},
		"NUL in session":     {func(r *alephsandbox.Request) { r.Session = "a\x00b" }, "session"},
		"no program":         {func(r *alephsandbox.Request) { r.Argv = nil }, "argv"},
		"empty program":      {func(r *alephsandbox.Request) { r.Argv = []string{""} }, "argv"},
		"relative read":      {func(r *alephsandbox.Request) { r.Read = []string{"/a", "rel"} }, "read[1]"},
		"empty write":        {func(r *alephsandbox.Request) { r.Write = []string{""} }, "write[0]"},
		"relative workspace": {func(r *alephsandbox.Request) { r.Workspace = "ws" }, "workspace"},
		"bad host":           {func(r *alephsandbox.Request) { r.Net = "ok.example, exa mple.com" }, "net"},
		"empty host list":    {func(r *alephsandbox.Request) { r.Net = " , " }, "net"},
		"bad net_hosts":      {func(r *alephsandbox.Request) { r.NetHosts = []string{"ok.example", "exa mple.com"} }, "net_hosts[1]"},
		"net and net_hosts":  {func(r *alephsandbox.Request) { r.Net, r.NetHosts = "all", []string{"ok.example"} }, "net"},
		"negative timeout":   {func(r *alephsandbox.Request) { r.TimeoutSeconds = -1 }, "timeout_seconds"},
		"NaN timeout":        {func(r *alephsandbox.Request) { r.TimeoutSeconds = math.NaN() }, "timeout_seconds"},
		"huge timeout":       {func(r *alephsandbox.Request) { r.TimeoutSeconds = 1e12 }, "timeout_seconds"},
		"tiny timeout":       {func(r *alephsandbox.Request) { r.TimeoutSeconds = 1e-6 }, "timeout_seconds"},
		"negative output":    {func(r *alephsandbox.Request) { r.MaxOutputBytes = -1 }, "max_output"},
		"stdin too large":    {func(r *alephsandbox.Request) { r.Stdin = make([]byte, driverapi.MaxStdinBytes+1) }, "stdin"},
		"env name with =":    {func(r *alephsandbox.Request) { r.Env = map[string]string{"A=B": "1"} }, "env"},
		"empty env name":     {func(r *alephsandbox.Request) { r.Env = map[string]string{"": "1"} }, "env"},
	} {
		r := good
		tc.edit(&r)
		_, err := r.Command()
		var re *alephsandbox.RequestError
		if !errors.As(err, &re) || re.Field != tc.field || re.Reason == "" {
			t.Errorf("%s: got %v, want a RequestError of field %s", name, err, tc.field)
		}
	}

	dir := t.TempDir()
	r := good
	r.Dir = dir
	r.Read = []string{"sub/../in", "/abs//x/"}
	r.Write = []string{"out"}
	r.Workspace = "ws"
	r.Net = " Example.com , *.example.org:443 "
	r.TimeoutSeconds = 1.5
	r.Env = map[string]string{"A": "1"}
	cmd, err := r.Command()
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	c := cmd.Capabilities
	if !slices.Equal(c.FSRead, []string{filepath.Join(dir, "in"), "/abs/x"}) || !slices.Equal(c.FSWrite, []string{filepath.Join(dir, "out")}) ||
		cmd.Workspace != filepath.Join(dir, "ws") || cmd.Program != "/bin/echo" || !slices.Equal(cmd.Args, []string{"x"}) ||
		cmd.Timeout != 1500*time.Millisecond || cmd.Env["A"] != "1" || cmd.SessionID != "s" {
		t.Fatalf("control: %+v", cmd)
	}
	if c.Network.Mode != driverapi.NetworkAllowHosts || !slices.Equal(c.Network.Hosts, []string{"Example.com", "*.example.org:443"}) {
		t.Fatalf("control: network %+v", c.Network)
	}
}

// The host list reads the same from net (the CLI's syntax) and from
// net_hosts, and NetString gives back what ParseNet reads.
func TestParseNet(t *testing.T) {
	for _, tc := range []struct {
		net   string
		hosts []string
		want  driverapi.NetworkPolicy
	}{
		{"", nil, driverapi.NetworkPolicy{Mode: driverapi.NetworkNone}},
		{"NONE", nil, driverapi.NetworkPolicy{Mode: driverapi.NetworkNone}},
		{" all ", nil, driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}},
		{"a.example,10.0.0.1:80", nil, driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"a.example", "10.0.0.1:80"}}},
		{"", []string{"a.example", "10.0.0.1:80"}, driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"a.example", "10.0.0.1:80"}}},
	} {
		got, err := alephsandbox.ParseNet(tc.net, tc.hosts)
		if err != nil || got.Mode != tc.want.Mode || !slices.Equal(got.Hosts, tc.want.Hosts) {
			t.Errorf("ParseNet(%q, %q) = %+v, %v; want %+v", tc.net, tc.hosts, got, err, tc.want)
			continue
		}
		back, err := alephsandbox.ParseNet(alephsandbox.NetString(got), nil)
		if err != nil || back.Mode != got.Mode || !slices.Equal(back.Hosts, got.Hosts) {
			t.Errorf("NetString(%+v) = %q reads back as %+v, %v", got, alephsandbox.NetString(got), back, err)
		}
	}
}
