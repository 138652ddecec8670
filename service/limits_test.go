package service

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// fakeHost is a pipeline that runs nothing: Execute answers "ran" and
// counts; the reads report whether they were asked.
type fakeHost struct {
	// The files API: none of these tests reaches it.
	alephsandbox.FileHost
	mu         sync.Mutex
	executed   []core.Command
	workspaces int
}

func (h *fakeHost) Execute(_ context.Context, cmd core.Command) (*core.Output, error) {
	h.mu.Lock()
	h.executed = append(h.executed, cmd)
	h.mu.Unlock()
	if cmd.Stdout != nil {
		_, _ = cmd.Stdout.Write([]byte("ran\n"))
	}
	return &core.Output{Stdout: []byte("ran\n"), CommandID: "cmd-fake"}, nil
}

// The layered sessions' calls: this host holds no layer.
func (h *fakeHost) Changes(context.Context, string) ([]layer.Change, error) {
	return nil, core.ErrNoLayer
}
func (h *fakeHost) Diff(context.Context, string, ...string) (string, error) {
	return "", core.ErrNoLayer
}
func (h *fakeHost) Apply(context.Context, string, []string, layer.ApplyOptions) (layer.ApplyResult, error) {
	return layer.ApplyResult{}, core.ErrNoLayer
}
func (h *fakeHost) Discard(context.Context, string) error { return core.ErrNoLayer }

func (h *fakeHost) runs() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.executed) }
func (h *fakeHost) Capabilities(context.Context) (driverapi.HostCapabilities, error) {
	return driverapi.HostCapabilities{}, nil
}
func (h *fakeHost) PolicyDigest(string) string { return "d" }
func (h *fakeHost) ApplyNetworkGrant(context.Context, string, string, uint16, string) (string, error) {
	return "d", nil
}
func (h *fakeHost) Grants(id string) core.SessionGrants { return core.SessionGrants{SessionID: id} }
func (h *fakeHost) RevokeGrant(context.Context, string, string) (string, error) {
	return "", fmt.Errorf("no grant")
}
func (h *fakeHost) ForgetSession(string) {}
func (h *fakeHost) WorkspacePath(string) (string, error) {
	h.mu.Lock()
	h.workspaces++
	h.mu.Unlock()
	return "/ws", nil
}
func (h *fakeHost) Close() error { return nil }

func newLimitServer(t *testing.T, l core.ServeLimits) (*Server, *fakeHost, *httptest.Server) {
	t.Helper()
	h := &fakeHost{}
	srv, err := New(Options{Host: h, Broker: NewBroker(false, nil), Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return srv, h, hs
}

// connectError is a Connect protocol error body.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// unary posts a Connect unary JSON call and returns the HTTP status and
// the error body (if any).
func unary(t *testing.T, base, method string, body io.Reader, size int64) (int, connectError, string) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/aleph.host.v1.Service/"+method, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var ce connectError
	_ = json.Unmarshal(b, &ce)
	return resp.StatusCode, ce, string(b)
}

// execute posts a Connect server-stream Execute call with a raw JSON
// message and returns the end-of-stream error (code, message) and the
// messages before it.
func execute(t *testing.T, base, msg string) (code, message string, msgs []string) {
	t.Helper()
	var env bytes.Buffer
	env.WriteByte(0)
	_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
	env.WriteString(msg)
	req, _ := http.NewRequest("POST", base+"/aleph.host.v1.Service/Execute", &env)
	req.Header.Set("Content-Type", "application/connect+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for len(body) >= 5 {
		flags, n := body[0], binary.BigEndian.Uint32(body[1:5])
		data := body[5 : 5+n]
		body = body[5+n:]
		if flags&2 != 0 {
			var end struct {
				Error *connectError `json:"error"`
			}
			_ = json.Unmarshal(data, &end)
			if end.Error != nil {
				return end.Error.Code, end.Error.Message, msgs
			}
			return "", "", msgs
		}
		msgs = append(msgs, string(data))
	}
	return "", "", msgs
}

// A request body over serve.max_request_bytes is refused with
// resource_exhausted naming the limit, whether its size is announced
// (refused before it is read) or not (refused where it passes the
// limit). Control: a request under the limit is answered.
func TestRequestBodyBounded(t *testing.T) {
	_, h, hs := newLimitServer(t, core.ServeLimits{MaxRequestBytes: 64 << 10})
	// Just over the limit: a body that fits in the sockets' buffers is
	// written whole before the server answers and closes, so the client
	// reads the answer instead of a reset (a far larger body can meet the
	// close while it is still being written, which says nothing of the
	// limit).
	big := `{"command":"` + strings.Repeat("x", 80<<10) + `"}`
	for _, announced := range []bool{true, false} {
		size := int64(-1)
		if announced {
			size = int64(len(big))
		}
		status, ce, raw := unary(t, hs.URL, "CheckPolicy", strings.NewReader(big), size)
		if status != http.StatusTooManyRequests || ce.Code != "resource_exhausted" || !strings.Contains(ce.Message, "serve.max_request_bytes") {
			t.Fatalf("announced=%v: status %d, body %.300s", announced, status, raw)
		}
	}
	code, msg, _ := execute(t, hs.URL, `{"session":"s","argv":["/bin/true"],"stdin":"`+strings.Repeat("A", 80<<10)+`"}`)
	if code != "resource_exhausted" || !strings.Contains(msg, "serve.max_request_bytes") {
		t.Fatalf("Execute over the limit: %s %s", code, msg)
	}
	if h.runs() != 0 {
		t.Fatal("a request over the limit ran")
	}
	status, _, raw := unary(t, hs.URL, "CheckPolicy", strings.NewReader(`{"command":"ls"}`), -1)
	if status != http.StatusOK {
		t.Fatalf("control: status %d %s", status, raw)
	}
}

// A misspelt field is refused (invalid_argument naming it), never
// ignored: "memory_mbb" must not run without the memory limit. Control:
// the same request spelt right runs.
func TestUnknownJSONFieldRefused(t *testing.T) {
	_, h, hs := newLimitServer(t, core.ServeLimits{})
	code, msg, _ := execute(t, hs.URL, `{"session":"s","argv":["/bin/true"],"memory_mbb":"16"}`)
	if code != "invalid_argument" || !strings.Contains(msg, "memory_mbb") {
		t.Fatalf("unknown field: %q %q", code, msg)
	}
	status, ce, _ := unary(t, hs.URL, "CheckPolicy", strings.NewReader(`{"command":"ls","timeout_secs":1}`), -1)
	if status != http.StatusBadRequest || ce.Code != "invalid_argument" || !strings.Contains(ce.Message, "timeout_secs") {
		t.Fatalf("unary unknown field: %d %+v", status, ce)
	}
	if h.runs() != 0 {
		t.Fatal("a request with an unknown field ran")
	}
	code, msg, msgs := execute(t, hs.URL, `{"session":"s","argv":["/bin/true"],"memory_mb":"16","timeoutSeconds":5}`)
	if code != "" || h.runs() != 1 || len(msgs) == 0 {
		t.Fatalf("control: %q %q, runs %d", code, msg, h.runs())
	}
}

// A client's max_output above the server's ceiling is refused with
// resource_exhausted naming serve.max_output_bytes, before anything runs.
// Control: one under it runs with it.
func TestMaxOutputCeiling(t *testing.T) {
	_, h, hs := newLimitServer(t, core.ServeLimits{MaxOutputBytes: 1 << 20})
	code, msg, _ := execute(t, hs.URL, `{"session":"s","argv":["/bin/true"],"max_output":"157286400"}`)
	if code != "resource_exhausted" || !strings.Contains(msg, "serve.max_output_bytes") {
		t.Fatalf("over the ceiling: %q %q", code, msg)
	}
	if h.runs() != 0 {
		t.Fatal("a command over the output ceiling ran")
	}
	if code, msg, _ := execute(t, hs.URL, `{"session":"s","argv":["/bin/true"],"max_output":"1000"}`); code != "" {
		t.Fatalf("control: %q %q", code, msg)
	}
	if h.runs() != 1 || h.executed[0].MaxOutputBytes != 1000 {
		t.Fatalf("control: %d runs", h.runs())
	}
}

func sessionsListed(t *testing.T, base string) string {
	t.Helper()
	status, _, raw := unary(t, base, "Sessions", strings.NewReader(`{"list":{}}`), -1)
	if status != http.StatusOK {
		t.Fatalf("list: %d %s", status, raw)
	}
	return raw
}

// Reads and refusals keep nothing: describing or listing the grants of an
// unknown session creates neither a session nor its workspace, and an
// Execute refused for its session name (a NUL, 2 MB) is not remembered.
// Control: a command that runs makes its session listed.
func TestReadsAndRefusalsKeepNoState(t *testing.T) {
	srv, h, hs := newLimitServer(t, core.ServeLimits{})
	for i := 0; i < 20; i++ {
		if status, _, raw := unary(t, hs.URL, "Sessions", strings.NewReader(fmt.Sprintf(`{"describe":{"session":"ghost-%d"}}`, i)), -1); status != http.StatusOK {
			t.Fatalf("describe: %d %s", status, raw)
		}
		if status, _, raw := unary(t, hs.URL, "Grants", strings.NewReader(fmt.Sprintf(`{"list":{"session":"ghost-%d"}}`, i)), -1); status != http.StatusOK {
			t.Fatalf("grants list: %d %s", status, raw)
		}
	}
	for _, bad := range []string{`bad\u0000name`, strings.Repeat("n", 2<<20)} {
		code, _, _ := execute(t, hs.URL, `{"session":"`+bad+`","argv":["/bin/true"]}`)
		if code != "invalid_argument" && code != "resource_exhausted" {
			t.Fatalf("bad session name: %q", code)
		}
	}
	if h.workspaces != 0 || h.runs() != 0 {
		t.Fatalf("reads made %d workspaces, ran %d", h.workspaces, h.runs())
	}
	if raw := sessionsListed(t, hs.URL); strings.Contains(raw, "ghost") || strings.Contains(raw, "bad") || len(srv.sessions) != 0 {
		t.Fatalf("reads or refusals created sessions: %s", raw)
	}
	if code, msg, _ := execute(t, hs.URL, `{"session":"real","argv":["/bin/true"]}`); code != "" {
		t.Fatalf("control: %q %q", code, msg)
	}
	if raw := sessionsListed(t, hs.URL); !strings.Contains(raw, `"real"`) {
		t.Fatalf("control: the session that ran is not listed: %s", raw)
	}
}

// Past serve.max_sessions a command of a new session is refused with
// resource_exhausted naming the limit; the sessions held still run.
func TestMaxSessions(t *testing.T) {
	_, h, hs := newLimitServer(t, core.ServeLimits{MaxSessions: 2})
	for _, s := range []string{"a", "b"} {
		if code, msg, _ := execute(t, hs.URL, `{"session":"`+s+`","argv":["/bin/true"]}`); code != "" {
			t.Fatalf("%s: %q %q", s, code, msg)
		}
	}
	code, msg, _ := execute(t, hs.URL, `{"session":"c","argv":["/bin/true"]}`)
	if code != "resource_exhausted" || !strings.Contains(msg, "serve.max_sessions") {
		t.Fatalf("third session: %q %q", code, msg)
	}
	if code, msg, _ := execute(t, hs.URL, `{"session":"a","argv":["/bin/true"]}`); code != "" || h.runs() != 3 {
		t.Fatalf("a held session: %q %q (runs %d)", code, msg, h.runs())
	}
}

// Connections past serve.max_connections_per_peer and max_connections
// are closed at once and counted in /metrics; one closing makes room.
func TestConnectionCaps(t *testing.T) {
	for _, c := range []struct {
		name          string
		total, perPer int
		label         string
	}{{"per peer", 10, 2, `limit="per_peer"`}, {"total", 2, 10, `limit="total"`}} {
		t.Run(c.name, func(t *testing.T) {
			srv, _, _ := newLimitServer(t, core.ServeLimits{MaxConnections: c.total, MaxConnectionsPerPeer: c.perPer})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: time.Minute}
			go func() { _ = hs.Serve(srv.LimitListener(ln)) }()
			t.Cleanup(func() { _ = hs.Close() })
			dial := func() net.Conn {
				conn, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				return conn
			}
			// alive reports whether the server answers on conn.
			alive := func(conn net.Conn) bool {
				_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
				fmt.Fprintf(conn, "POST /aleph.host.v1.Service/CheckPolicy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"command\":\"ls\"}")
				line, err := readLine(conn)
				return err == nil && strings.HasPrefix(line, "HTTP/1.1 200")
			}
			held := []net.Conn{dial(), dial()}
			for _, h := range held {
				if !alive(h) {
					t.Fatal("control: a connection under the caps was not served")
				}
			}
			extra := dial()
			if alive(extra) {
				t.Fatal("a connection past the cap was served")
			}
			var b strings.Builder
			srv.metrics.write(&b, func() gauges {
				var g gauges
				g.connsOpen, g.refusedTotal, g.refusedPeer = srv.conns.stats()
				return g
			}())
			if !strings.Contains(b.String(), "aleph_sandbox_connections_refused_total{"+c.label+"} 1\n") ||
				!strings.Contains(b.String(), "aleph_sandbox_connections_open 2\n") {
				t.Fatalf("metrics: %s", b.String())
			}
			held[0].Close()
			// The server sees the close when it next reads: wait for
			// the count to drop, then a new connection is served.
			deadline := time.Now().Add(20 * time.Second)
			for open, _, _ := srv.conns.stats(); open >= 2 && time.Now().Before(deadline); open, _, _ = srv.conns.stats() {
				time.Sleep(10 * time.Millisecond)
			}
			if !alive(dial()) {
				t.Fatal("a closed connection did not make room")
			}
		})
	}
}

func readLine(c net.Conn) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := c.Read(one); err != nil {
			return string(b), err
		}
		if one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
}

// limitHost refuses the commands of session "full" as the Linux driver
// refuses a session past sandbox.linux.max_session_networks.
type limitHost struct{ fakeHost }

func (h *limitHost) Execute(ctx context.Context, cmd core.Command) (*core.Output, error) {
	if cmd.SessionID == "full" {
		return nil, fmt.Errorf("driver aleph-driver-bwrap: Run: %w", &driverapi.LimitError{Limit: "sandbox.linux.max_session_networks", Value: 64,
			Reason: "64 sessions hold a network namespace already"})
	}
	return h.fakeHost.Execute(ctx, cmd)
}

// A driver's capacity limit is resource_exhausted naming its key, and its
// message says it is the driver's and where it is raised (the section of
// serve's configuration file), not only "raise the limit" beside serve's
// own max_sessions. The control: another session runs.
func TestDriverLimitSaysWhereToRaiseIt(t *testing.T) {
	h := &limitHost{}
	srv, err := New(Options{Host: h, Broker: NewBroker(false, nil), Limits: core.ServeLimits{MaxSessions: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	if code, msg, _ := execute(t, hs.URL, `{"session":"ok","argv":["/bin/true"]}`); code != "" {
		t.Fatalf("control: %q %q", code, msg)
	}
	code, msg, _ := execute(t, hs.URL, `{"session":"full","argv":["/bin/true"]}`)
	if code != "resource_exhausted" {
		t.Fatalf("code %q, want resource_exhausted (%s)", code, msg)
	}
	for _, want := range []string{"sandbox.linux.max_session_networks = 64", "a limit of the driver, not of serve", "set max_session_networks under [sandbox.linux] in serve's configuration file"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	// The pipeline's own limits keep their text: no second hint.
	if got := driverLimitHint(&core.LimitError{Limit: "serve.max_sessions", Value: 2, Reason: "full"}).Error(); strings.Contains(got, "driver") {
		t.Errorf("a limit of serve's got the driver's hint: %q", got)
	}
}
