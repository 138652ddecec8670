//go:build linux

package alephsandbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// headerLog records the Authorization header each request brought.
type headerLog struct {
	mu  sync.Mutex
	got []string
}

func (h *headerLog) add(v string) { h.mu.Lock(); h.got = append(h.got, v); h.mu.Unlock() }
func (h *headerLog) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

// recordingUpstream answers "auth-ok" when Authorization equals want and
// "auth-other" otherwise, never echoing the header back, so a secret in the
// child's output could only have come from the sandbox side.
func recordingUpstream(t *testing.T, want string) (port string, log *headerLog) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log = &headerLog{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		log.add(a)
		if a == want {
			io.WriteString(w, "auth-ok")
			return
		}
		io.WriteString(w, "auth-other")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), log
}

// lockedBuf is a concurrency-safe log sink.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestSecretInjectionEndToEnd runs curl in the bwrap sandbox through the
// runtime alephsandbox.New builds from a configuration file (core, the
// proxy with the file's injection rule, the driver plugin, the audit file),
// with no piece replaced by a fake, with one secret and one injection rule for one upstream:
// the child sees only the placeholder, the upstream named by the rule gets
// the real header over plain HTTP, another allowed upstream gets only what
// the child sent (the placeholder), and the value appears in none of the
// child's output, the audit log file, the proxy's decision records or the
// logs.
func TestSecretInjectionEndToEnd(t *testing.T) {
	for _, tool := range []string{"bwrap", "curl", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: this test runs curl in a bubblewrap sandbox", tool)
		}
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin+"/",
		"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-driver-bwrap",
		"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}

	raw := make([]byte, 16)
	rand.Read(raw)
	secret := "s3cr3t-" + hex.EncodeToString(raw)
	want := "Bearer " + secret
	port, injected := recordingUpstream(t, want)
	otherPort, other := recordingUpstream(t, want)

	home := t.TempDir()
	auditPath := filepath.Join(home, "audit.jsonl")
	t.Setenv("XDG_DATA_HOME", filepath.Join(home, "data"))
	t.Setenv("ALEPH_SANDBOX_SANDBOX__AUDIT_LOG", auditPath)
	t.Setenv("ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT", filepath.Join(home, "ws"))
	t.Setenv("ALEPH_SANDBOX_SANDBOX__DRIVER", filepath.Join(bin, "aleph-driver-bwrap"))
	cfgPath := filepath.Join(home, "config.toml")
	toml := `[[sandbox.network.secret_injections]]
host = "127.0.0.1:` + port + `"
header = "Authorization"
secret = "API_TOKEN"
format = "Bearer {secret}"
`
	if err := os.WriteFile(cfgPath, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := alephsandbox.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox.AuditLog != auditPath || len(cfg.Sandbox.Network.SecretInjections) != 1 {
		t.Fatalf("config not as written: audit %q injections %+v", cfg.Sandbox.AuditLog, cfg.Sandbox.Network.SecretInjections)
	}

	var logs lockedBuf
	logger := hclog.New(&hclog.LoggerOptions{Name: "e2e", Output: &logs, Level: hclog.Trace})
	sink := &memSink{}
	sb, err := alephsandbox.New(cfg, alephsandbox.WithLogger(logger), alephsandbox.WithAuditSink(sink),
		alephsandbox.WithApprover(approveAll{}))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()

	script := `echo "child-sees=$API_TOKEN"
env | grep -c "` + secret + `" || true
echo "injected=$(curl -sS --max-time 20 -H "Authorization: Bearer $API_TOKEN" http://127.0.0.1:$PORT/)"
echo "other=$(curl -sS --max-time 20 -H "Authorization: Bearer $API_TOKEN" http://127.0.0.1:$OTHER/)"
echo "to-stderr=$API_TOKEN" >&2`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := sb.Execute(ctx, core.Command{
		SessionID: "e2e-secrets",
		Program:   "/bin/sh",
		Args:      []string{"-c", script},
		Env:       map[string]string{"PORT": port, "OTHER": otherPort},
		Secrets:   map[string]string{"API_TOKEN": secret},
		Capabilities: driverapi.Capabilities{
			SpawnSubprocess: true,
			Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts,
				Hosts: []string{"127.0.0.1:" + port, "127.0.0.1:" + otherPort}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := string(out.Stdout), string(out.Stderr)
	if out.Exit.ExitCode != 0 || out.Backend != "bwrap" {
		t.Fatalf("exit %+v backend %q\nstdout %s\nstderr %s", out.Exit, out.Backend, stdout, stderr)
	}
	for _, w := range []string{"child-sees=aleph:secret:API_TOKEN\n", "\n0\n", "injected=auth-ok\n", "other=auth-other\n"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("child output lacks %q:\n%s\nstderr: %s", w, stdout, stderr)
		}
	}
	if !strings.Contains(stderr, "to-stderr=aleph:secret:API_TOKEN") {
		t.Errorf("child stderr: %q", stderr)
	}
	// The injected upstream got the real value, the other one only the
	// placeholder the child sent.
	if g := injected.all(); len(g) != 1 || g[0] != want {
		t.Errorf("injected upstream saw Authorization %q, want the secret", g)
	}
	if g := other.all(); len(g) != 1 || g[0] != "Bearer aleph:secret:API_TOKEN" {
		t.Errorf("other upstream saw Authorization %q, want the placeholder", g)
	}

	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	audit, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(audit, []byte(`"session_id":"e2e-secrets"`)) {
		t.Errorf("audit log has no record of the command:\n%s", audit)
	}
	// The proxy's decisions reach the ledger (one network record per
	// connection), and through it every sink.
	var decisions []*core.NetworkAudit
	sink.mu.Lock()
	for _, r := range sink.recs {
		if r.Network != nil {
			decisions = append(decisions, r.Network)
		}
	}
	sink.mu.Unlock()
	decJSON, _ := json.Marshal(decisions)
	if !bytes.Contains(decJSON, []byte(`"127.0.0.1"`)) || len(decisions) < 2 {
		t.Errorf("proxy decisions: %s", decJSON)
	}
	if !strings.Contains(logs.String(), "e2e-secrets") {
		t.Errorf("the logs say nothing about the command, so checking them proves nothing:\n%s", logs.String())
	}
	for name, text := range map[string]string{
		"child stdout": stdout, "child stderr": stderr, "audit log": string(audit),
		"proxy decisions": string(decJSON), "logs": logs.String(),
	} {
		if strings.Contains(text, secret) {
			t.Errorf("the secret value appears in the %s", name)
		}
	}
}
