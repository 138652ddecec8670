package mcpserver

import "testing"

// TestApplyCommandNamesTheHostsOptions: the command apply's refusal shows
// the user reaches the session's server with the options mcp --host was
// given (a TCP server's CA and client certificate), quoted for a shell;
// in-process it names no server.
func TestApplyCommandNamesTheHostsOptions(t *testing.T) {
	for _, c := range []struct {
		host string
		opts []string
		want string
	}{
		{"", nil, "aleph-sandbox session apply s a.txt"},
		{"unix:/run/a.sock", nil, "aleph-sandbox session apply --host unix:/run/a.sock s a.txt"},
		{"tcp:sb.example:7443", []string{"--ca-file", "/etc/my ca.pem", "--cert-file", "/c.pem", "--key-file", "/c.key"},
			"aleph-sandbox session apply --host tcp:sb.example:7443 --ca-file '/etc/my ca.pem' --cert-file /c.pem --key-file /c.key s a.txt"},
	} {
		if got := applyCommand(c.host, c.opts, "s", []string{"a.txt"}); got != c.want {
			t.Errorf("applyCommand(%q, %q): %q, want %q", c.host, c.opts, got, c.want)
		}
	}
}
