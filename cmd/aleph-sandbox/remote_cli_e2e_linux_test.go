//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// sessionsOn is the sessions the server behind c holds.
func sessionsOn(t *testing.T, c hostv1connect.ServiceClient) []string {
	t.Helper()
	resp, err := c.Sessions(context.Background(), connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_List{List: &hostv1.ListSessions{}}}))
	if err != nil {
		t.Fatalf("list sessions: %v", err)
	}
	var ids []string
	for _, s := range resp.Msg.GetSessions() {
		ids = append(ids, s.GetSession())
	}
	return ids
}

// TestRemoteCLIOverTCP: the CLI's --host against a real serve on TCP with
// TLS and a token. exec without the token, with a wrong one, or trusting
// another CA is refused (exit 125, saying which option it wants) and the
// server ran nothing (the session was never made); the same command with
// --ca-file and $ALEPH_SANDBOX_TOKEN runs. An interactive command's
// output streams (its first line is read before its stdin is written),
// its spawn is approved by --yes, and its exit status is kept; a SIGTERM
// to the CLI reaches the command's trap;
// $ALEPH_SANDBOX_HOST names the TCP server as --host does; the TLS options
// with a unix socket or without a server are refused. `session changes`
// and `session discard` reach the server's layer over TCP, and
// `mcp --host tcp:` runs a tool for the SDK's client.
func TestRemoteCLIOverTCP(t *testing.T) {
	h := newServeHarness(t)
	pki := newTestPKI(t)
	const token = "tok-5d1f8a3c7e9b2046c1a8"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongCA, _ := selfSigned(t, "wrong CA")
	wrongCAFile := writePEM(t, t.TempDir(), "wrong-ca.pem", "CERTIFICATE", wrongCA.Raw)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	p := h.start(t, sock, "[serve]\ntokens_file = '"+tokens+"'\n[serve.tls]\ncert = '"+pki.certFile+"'\nkey = '"+pki.keyFile+"'\n", "--listen", "tcp:127.0.0.1:0")
	host := "tcp:" + tcpAddrOf(t, p, "tcp")
	local := client(sock)
	withToken := []string{tokenEnv + "=" + token}

	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			name string
			env  []string
			args []string
			want []string
		}{
			{"no token", nil, []string{"--ca-file", pki.caFile}, []string{"unauthenticated", "$" + tokenEnv}},
			{"wrong token", []string{tokenEnv + "=" + token + "x"}, []string{"--ca-file", pki.caFile}, []string{"the bearer token is not valid", "$" + tokenEnv}},
			{"system CAs", withToken, nil, []string{"did not verify", "--ca-file"}},
			{"another CA", withToken, []string{"--ca-file", wrongCAFile}, []string{"did not verify", "--ca-file"}},
			{"TLS options on a unix socket", withToken, []string{"--host", "unix:" + sock, "--ca-file", pki.caFile}, []string{"apply to --host tcp:HOST:PORT only"}},
			{"key without certificate", withToken, []string{"--ca-file", pki.caFile, "--key-file", pki.clientKeyFile}, []string{"go together"}},
		} {
			session := "refused-" + strings.ReplaceAll(c.name, " ", "-")
			args := append([]string{"exec", "--host", host}, c.args...)
			args = append(args, "--session", session, "--", "/bin/echo", "ran")
			code, out, errOut := runCLI(h, c.env, args...)
			if code != exitSandboxError || out != "" {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want 125 and nothing run", c.name, code, out, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("%s: stderr %q does not say %q", c.name, errOut, w)
				}
			}
			if slices.Contains(sessionsOn(t, local), session) {
				t.Errorf("%s: the server made the session of a refused call", c.name)
			}
		}
		// Without a server, the TLS options would secure nothing.
		code, out, errOut := runCLI(h, nil, "exec", "--ca-file", pki.caFile, "--", "/bin/echo", "ran")
		if code != exitSandboxError || out != "" || !strings.Contains(errOut, "apply with --host tcp:HOST:PORT") {
			t.Errorf("--ca-file without a server: exit %d, %q, %q", code, out, errOut)
		}
		// The control: the same call with the CA and the token runs,
		// and the server holds its session.
		code, out, errOut = runCLI(h, withToken, "exec", "--host", host, "--ca-file", pki.caFile, "--session", "refused-no-token", "--", "/bin/echo", "ran")
		if code != 0 || out != "ran\n" {
			t.Fatalf("with the CA and the token: exit %d, %q, %q", code, out, errOut)
		}
		if !slices.Contains(sessionsOn(t, local), "refused-no-token") {
			t.Error("the server does not hold the session of the call that ran")
		}
	})

	t.Run("streams stdin approvals exit status", func(t *testing.T) {
		// The control of the approval: without --yes (and no terminal to
		// ask) the spawn beyond the service's baseline is denied, and
		// nothing runs.
		code, out, denied := runCLI(h, withToken, "exec", "--host", host, "--ca-file", pki.caFile, "--spawn", "--session", "stream-denied",
			"--", "/bin/sh", "-c", "echo ran")
		if code == 0 || strings.Contains(out, "ran") {
			t.Fatalf("spawn without --yes: exit %d, %q, %q; want it denied", code, out, denied)
		}
		t.Logf("without --yes: exit %d, %q", code, strings.TrimSpace(denied))
		// The first line is read before stdin is written: it came while
		// the command still ran, not with its result.
		cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "exec", "--host", host, "--ca-file", pki.caFile,
			"-i", "--spawn", "--yes", "--session", "stream", "--", "/bin/sh", "-c", "echo first; read x; echo got $x; exit 7")
		cmd.Env = append(os.Environ(), withToken...)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		errOut := &lockedBuffer{}
		cmd.Stderr = errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		r := bufio.NewReader(stdout)
		first, err := r.ReadString('\n')
		if err != nil || first != "first\n" {
			t.Fatalf("first line: %q %v (stderr %q)", first, err, errOut)
		}
		if _, err := io.WriteString(stdin, "second\n"); err != nil {
			t.Fatal(err)
		}
		_ = stdin.Close()
		rest, _ := io.ReadAll(r)
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 || string(rest) != "got second\n" {
			t.Fatalf("exit %v, rest %q, stderr %q; want exit 7 and %q", err, rest, errOut, "got second\n")
		}
	})

	t.Run("signal", func(t *testing.T) {
		// SIGTERM to the CLI reaches the command through the service's
		// Signal call over TCP: its trap answers, and its status is kept.
		cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "exec", "--host", host, "--ca-file", pki.caFile,
			"--spawn", "--yes", "--session", "signal", "--", "/bin/sh", "-c", `trap 'echo got-term; exit 3' TERM; echo up; while :; do sleep 0.05; done`)
		cmd.Env = append(os.Environ(), withToken...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		errOut := &lockedBuffer{}
		cmd.Stderr = errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		r := bufio.NewReader(stdout)
		if up, err := r.ReadString('\n'); err != nil || up != "up\n" {
			t.Fatalf("the command's first line: %q %v (stderr %q)", up, err, errOut)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(r)
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 || string(rest) != "got-term\n" {
			t.Fatalf("after SIGTERM: %v, stdout %q, stderr %q; want exit 3 and %q", err, rest, errOut, "got-term\n")
		}
	})

	t.Run("ALEPH_SANDBOX_HOST", func(t *testing.T) {
		code, out, errOut := runCLI(h, append([]string{hostEnv + "=" + host}, withToken...), "exec", "--ca-file", pki.caFile, "--json", "--", "/bin/echo", "by env")
		var res execResult
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Stdout != "by env\n" {
			t.Fatalf("exec by $%s: exit %d, %q, %q", hostEnv, code, out, errOut)
		}
	})

	t.Run("session", func(t *testing.T) {
		// A layered command's write, listed by changes over TCP; without
		// the token the same call is refused, saying so.
		code, out, errOut := runCLI(h, withToken, "exec", "--host", host, "--ca-file", pki.caFile, "--layered", "--spawn", "--yes",
			"--session", "lay", "--", "/bin/sh", "-c", "echo layered > made.txt")
		layered := code == 0
		if !layered && !strings.Contains(errOut, "unavailable") {
			t.Fatalf("layered exec over TCP: exit %d, %q, %q", code, out, errOut)
		}
		code, out, errOut = runCLI(h, nil, "session", "changes", "--json", "--host", host, "--ca-file", pki.caFile, "lay")
		if code != exitSandboxError || !strings.Contains(errOut, "unauthenticated") || !strings.Contains(errOut, "$"+tokenEnv) {
			t.Errorf("session changes without the token: exit %d, %q, %q", code, out, errOut)
		}
		if !layered {
			t.Logf("layered sessions unavailable here (%s): discard of a session without a layer instead", strings.TrimSpace(errOut))
			code, out, errOut = runCLI(h, withToken, "session", "discard", "--host", host, "--ca-file", pki.caFile, "stream")
			if code != exitSandboxError || !strings.Contains(errOut, "layer") || strings.Contains(errOut, "unauthenticated") {
				t.Fatalf("session discard over TCP: exit %d, %q, %q", code, out, errOut)
			}
			return
		}
		code, out, errOut = runCLI(h, withToken, "session", "changes", "--json", "--host", host, "--ca-file", pki.caFile, "lay")
		var ch struct{ Changes []layer.Change }
		if code != 0 || json.Unmarshal([]byte(out), &ch) != nil {
			t.Fatalf("session changes over TCP: exit %d, %q, %q", code, out, errOut)
		}
		if !slices.ContainsFunc(ch.Changes, func(c layer.Change) bool { return c.Path == "made.txt" && c.Kind == "added" }) {
			t.Errorf("session changes over TCP: %+v, want made.txt added", ch.Changes)
		}
		code, out, errOut = runCLI(h, withToken, "session", "discard", "--host", host, "--ca-file", pki.caFile, "lay")
		if code != 0 || !strings.Contains(out, "layer discarded") {
			t.Errorf("session discard over TCP: exit %d, %q, %q", code, out, errOut)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "mcp", "--host", host, "--ca-file", pki.caFile, "--session", "mcp-tcp")
		cmd.Env = append(os.Environ(), append([]string{"XDG_CONFIG_HOME=" + t.TempDir()}, withToken...)...)
		mcpStderr := &lockedBuffer{}
		cmd.Stderr = mcpStderr
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		call, _ := mcpTools(t, ctx, cs)
		var run mcpserver.RunCommandResult
		if call(mcpserver.ToolRunCommand, map[string]any{"argv": []string{"/bin/echo", "over tcp"}}, &run) || run.Stdout != "over tcp\n" {
			t.Fatalf("run_command over TCP: %+v (stderr %q)", run, mcpStderr)
		}
		if !slices.Contains(sessionsOn(t, local), "mcp-tcp") {
			t.Error("the server does not hold the MCP server's session")
		}
	})
}
