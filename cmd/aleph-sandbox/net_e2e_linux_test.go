//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/internal/netnstest"
)

// netE2E runs the real binaries (CLI, bwrap driver plugin, sandbox-init),
// built once for TestNetE2E, with a private configuration, workspace root,
// audit log, log file and TMPDIR, so what the command leaves behind can be
// seen.
type netE2E struct {
	bin, home string
	env       []string
}

func newNetE2E(t *testing.T) *netE2E {
	t.Helper()
	for _, tool := range []string{"bwrap", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the network end-to-end test runs curl in a bubblewrap sandbox", tool)
		}
	}
	e := &netE2E{bin: t.TempDir(), home: t.TempDir()}
	installBinaries(t, e.bin)
	for _, d := range []string{"cfg", "data", "ws", "tmp"} {
		if err := os.MkdirAll(filepath.Join(e.home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + e.home,
		"XDG_CONFIG_HOME=" + filepath.Join(e.home, "cfg"),
		"XDG_DATA_HOME=" + filepath.Join(e.home, "data"),
		"TMPDIR=" + filepath.Join(e.home, "tmp"),
		"ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT=" + filepath.Join(e.home, "ws"),
		"ALEPH_SANDBOX_SANDBOX__AUDIT_LOG=" + filepath.Join(e.home, "audit.jsonl"),
		"ALEPH_SANDBOX_LOG=info",
		"ALEPH_SANDBOX_LOG_FILE=" + filepath.Join(e.home, "cli.log"),
	}
	return e
}

type netE2ERun struct {
	code           int
	stdout, stderr string
}

// exec runs `aleph-sandbox exec ARGS...` and checks that nothing it started
// is still running afterwards and that the proxy's socket directory is gone.
func (e *netE2E) exec(t *testing.T, args ...string) netE2ERun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "aleph-sandbox"), append([]string{"exec"}, args...)...)
	cmd.Env = e.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := netE2ERun{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("aleph-sandbox: %v", err)
	}
	e.checkNothingLeft(t)
	return r
}

// checkNothingLeft: no process runs a binary of this test's bin directory
// (the plugin, bwrap with the driver mounted, the bridge), and the private
// TMPDIR, where the proxy makes its socket directory, is empty again.
func (e *netE2E) checkNothingLeft(t *testing.T) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = left[:0]
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			if _, err := strconv.Atoi(p.Name()); err != nil {
				continue
			}
			cl, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
			if err == nil && bytes.Contains(cl, []byte(e.bin)) {
				left = append(left, p.Name()+": "+strings.ReplaceAll(string(cl), "\x00", " "))
			}
		}
		ents, _ := os.ReadDir(filepath.Join(e.home, "tmp"))
		for _, ent := range ents {
			left = append(left, "TMPDIR entry "+ent.Name())
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("left behind after the command:\n%s", strings.Join(left, "\n"))
	}
}

// netE2EUpstream serves a fixed body naming itself on ln.
func netE2EUpstream(t *testing.T, ln net.Listener, body string) {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

func netE2ELoopbackUpstream(t *testing.T, body string) (port string) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	netE2EUpstream(t, ln, body)
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// TestNetE2E drives `aleph-sandbox exec --net` with curl inside the
// sandbox against upstream servers on this machine: the listed target
// answers over HTTP and SOCKS5, everything else gets the proxy's refusal or
// no route at all, and each command leaves nothing behind.
func TestNetE2E(t *testing.T) {
	e := newNetE2E(t)
	if abi := hostLandlockABI(); abi < 4 {
		// Without Landlock's TCP rules (scripts/test-nolandlock.sh, old
		// kernels) --net HOST cannot be enforced: it must be refused
		// before anything runs, and that is all there is to test.
		r := e.exec(t, "--net", "example.com", "--spawn", "--yes", "--", "true")
		if r.code != 125 || !strings.Contains(r.stderr, "network_via_proxy") {
			t.Fatalf("Landlock ABI %d: exit %d stderr %q, want the refusal (125, network_via_proxy)", abi, r.code, r.stderr)
		}
		return
	}
	const body = "hello-from-e2e-upstream"
	port := netE2ELoopbackUpstream(t, body)
	otherPort := netE2ELoopbackUpstream(t, "other-upstream-must-not-be-seen")
	target := "127.0.0.1:" + port
	url := "http://" + target + "/"

	// Positive control for every denial below: both servers answer directly
	// from the host.
	for _, p := range []string{port, otherPort} {
		resp, err := http.Get("http://127.0.0.1:" + p + "/")
		if err != nil {
			t.Fatalf("upstream %s not reachable from the host: %v", p, err)
		}
		resp.Body.Close()
	}

	t.Run("listed target over HTTP", func(t *testing.T) {
		r := e.exec(t, "--net", target, "--spawn", "--yes", "--", "curl", "-sS", "--max-time", "20", url)
		if r.code != 0 || r.stdout != body {
			t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("unlisted port gets the policy's 403", func(t *testing.T) {
		r := e.exec(t, "--net", target, "--spawn", "--yes", "--", "curl", "-sS", "--max-time", "20",
			"-w", "\nstatus=%{http_code}", "http://127.0.0.1:"+otherPort+"/")
		if !strings.HasSuffix(r.stdout, "status=403") || !strings.Contains(r.stdout, "aleph-sandbox network policy") ||
			!strings.Contains(r.stdout, "ip_literal_not_allowed") || strings.Contains(r.stdout, "must-not-be-seen") {
			t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("direct egress ignoring the proxy fails", func(t *testing.T) {
		r := e.exec(t, "--net", target, "--spawn", "--yes", "--", "curl", "-sS", "--max-time", "5", "--noproxy", "*", url)
		if r.code == 0 || strings.Contains(r.stdout, body) {
			t.Fatalf("direct connection got through: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("a listed name resolving to loopback is refused", func(t *testing.T) {
		r := e.exec(t, "--net", "localhost:"+port, "--spawn", "--yes", "--", "curl", "-sS", "--max-time", "20",
			"-w", "\nstatus=%{http_code}", "http://localhost:"+port+"/")
		if !strings.HasSuffix(r.stdout, "status=403") || !strings.Contains(r.stdout, "refused_loopback") || strings.Contains(r.stdout, body) {
			t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("SOCKS5", func(t *testing.T) {
		r := e.exec(t, "--net", target, "--spawn", "--yes", "--", "curl", "-sS", "--max-time", "20",
			"--socks5-hostname", "127.0.0.1:1080", url)
		if r.code != 0 || r.stdout != body {
			t.Fatalf("listed target: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
		r = e.exec(t, "--net", target, "--spawn", "--yes", "--", "curl", "-sS", "--max-time", "20",
			"--socks5-hostname", "127.0.0.1:1080", "http://127.0.0.1:"+otherPort+"/")
		if r.code == 0 || strings.Contains(r.stdout, "must-not-be-seen") {
			t.Fatalf("unlisted target through SOCKS5: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("json", func(t *testing.T) {
		r := e.exec(t, "--json", "--net", target, "--spawn", "--yes", "--", "curl", "-sS", "--max-time", "20", url)
		if r.code != 0 || strings.Count(strings.TrimSpace(r.stdout), "\n") != 0 {
			t.Fatalf("exit %d, want one line of JSON: %q (stderr %q)", r.code, r.stdout, r.stderr)
		}
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		dec.DisallowUnknownFields()
		var res execResult
		if err := dec.Decode(&res); err != nil {
			t.Fatalf("--json output %q: %v", r.stdout, err)
		}
		if res.Stdout != body || res.ExitCode == nil || *res.ExitCode != 0 || res.Signal == nil || *res.Signal != 0 || res.TimedOut || res.Truncated ||
			res.Denied || res.Error != "" || res.Backend != "bwrap" || res.DurationMS <= 0 {
			t.Errorf("--json result: %+v", res)
		}
		var raw map[string]any
		json.Unmarshal([]byte(r.stdout), &raw)
		for _, k := range []string{"stdout", "stderr", "exit_code", "signal", "timed_out", "truncated", "duration_ms", "denied", "reason", "rule", "backend", "error"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("--json lacks %q: %s", k, r.stdout)
			}
		}
	})
	t.Run("proxy decisions are logged and audited", func(t *testing.T) {
		log, err := os.ReadFile(filepath.Join(e.home, "cli.log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"allowed=true", "allowed=false", "reason=ip_literal_not_allowed", "reason=refused_loopback"} {
			if !bytes.Contains(log, []byte(want)) {
				t.Errorf("CLI log lacks %q", want)
			}
		}
		audit, err := os.ReadFile(filepath.Join(e.home, "audit.jsonl"))
		if err != nil || !bytes.Contains(audit, []byte(`"backend":"bwrap"`)) {
			t.Errorf("audit log: %v %q", err, audit)
		}
		// The ledger holds the proxy's decisions as records of their own,
		// allowed ones beside the denials.
		var allowed, refused int
		for _, line := range bytes.Split(audit, []byte("\n")) {
			var rec struct {
				Decision string `json:"decision"`
				Reason   string `json:"reason"`
				Network  *struct {
					Allowed bool   `json:"allowed"`
					Reason  string `json:"reason"`
				} `json:"network"`
			}
			if json.Unmarshal(line, &rec) != nil || rec.Network == nil {
				continue
			}
			switch {
			case rec.Network.Allowed && rec.Decision == "allow" && rec.Reason == "network_allowed":
				allowed++
			case rec.Network.Reason == "refused_loopback" && rec.Decision == "deny" && rec.Reason == "network_denied":
				refused++
			}
		}
		if allowed == 0 || refused == 0 {
			t.Errorf("audit log holds %d allowed and %d refused_loopback network records, want both", allowed, refused)
		}
	})
	t.Run("upstream in another network namespace", func(t *testing.T) {
		ip := netnstest.New(t, "alephe2e", 252)
		ln, err := netnstest.Listen(ip.Path, "tcp4", ip.Addr+":0")
		if err != nil {
			t.Fatal(err)
		}
		const nsBody = "hello-from-the-netns-host"
		netE2EUpstream(t, ln, nsBody)
		nsTarget := net.JoinHostPort(ip.Addr, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
		// Positive control: the host reaches it over the veth.
		resp, err := http.Get("http://" + nsTarget + "/")
		if err != nil {
			t.Fatalf("netns host not reachable from the host: %v", err)
		}
		resp.Body.Close()

		r := e.exec(t, "--net", nsTarget, "--spawn", "--yes", "--", "curl", "-sS", "--max-time", "20", "http://"+nsTarget+"/")
		if r.code != 0 || r.stdout != nsBody {
			t.Fatalf("through the chain: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
		r = e.exec(t, "--net", nsTarget, "--spawn", "--yes", "--", "curl", "-sS", "--max-time", "20",
			"--socks5-hostname", "127.0.0.1:1080", "http://"+nsTarget+"/")
		if r.code != 0 || r.stdout != nsBody {
			t.Fatalf("SOCKS5 through the chain: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
		r = e.exec(t, "--net", nsTarget, "--spawn", "--yes", "--", "curl", "-sS", "--max-time", "5", "--noproxy", "*", "http://"+nsTarget+"/")
		if r.code == 0 || strings.Contains(r.stdout, nsBody) {
			t.Fatalf("direct connection to the netns host got through: exit %d stdout %q", r.code, r.stdout)
		}
	})
}
