package main

import (
	"strings"
	"testing"
)

// `mcp --host` takes a unix:PATH or a tcp:HOST:PORT (with its TLS
// options, which nothing else takes) and none of the flags that choose an
// in-process pipeline; each mistake is refused before any serving.
// (--allow-spawn and --allow-net apply, for each call only:
// TestMCPHostBaselineIsForTheCallOnly.)
func TestMCPHostFlags(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"tcp no port":  {[]string{"mcp", "--host", "tcp:127.0.0.1"}, "tcp:HOST:PORT"},
		"relative":     {[]string{"mcp", "--host", "s.sock"}, "unix:PATH"},
		"TLS on unix":  {[]string{"mcp", "--host", "unix:/x.sock", "--ca-file", "ca.pem"}, "apply to --host tcp:HOST:PORT only"},
		"TLS no host":  {[]string{"mcp", "--ca-file", "ca.pem"}, "apply with --host tcp:HOST:PORT only"},
		"cert no key":  {[]string{"mcp", "--host", "tcp:127.0.0.1:1", "--cert-file", "c.pem"}, "go together"},
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
