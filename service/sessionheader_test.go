package service

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// post sends a Connect call (unary JSON, or with stream set one frame of a
// server stream) with the session header (none when header is "") and
// returns the error code and message (both "" on success) and the body.
func postWithSession(t *testing.T, base, method, header, msg string, stream bool) (code, message, body string) {
	t.Helper()
	var b bytes.Buffer
	ct := "application/json"
	if stream {
		ct = "application/connect+json"
		b.WriteByte(0)
		_ = binary.Write(&b, binary.BigEndian, uint32(len(msg)))
	}
	b.WriteString(msg)
	req, err := http.NewRequest("POST", base+"/aleph.host.v1.Service/"+method, &b)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	if header != "" {
		req.Header.Set(SessionHeader, header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if !stream {
		if resp.StatusCode == 200 {
			return "", "", string(raw)
		}
		var ce connectError
		_ = json.Unmarshal(raw, &ce)
		return ce.Code, ce.Message, string(raw)
	}
	for len(raw) >= 5 {
		flags, n := raw[0], binary.BigEndian.Uint32(raw[1:5])
		data := raw[5 : 5+n]
		raw = raw[5+n:]
		if flags&2 != 0 {
			var end struct {
				Error *connectError `json:"error"`
			}
			_ = json.Unmarshal(data, &end)
			if end.Error != nil {
				return end.Error.Code, end.Error.Message, body
			}
			return "", "", body
		}
		body += string(data)
	}
	return "", "", body
}

// A session header that disagrees with the body is refused with
// invalid_argument naming the header, and the command does not run; one
// that agrees (plain, or percent-encoded) and none at all are served.
func TestSessionHeaderMustAgreeWithBody(t *testing.T) {
	_, h, hs := newLimitServer(t, core.ServeLimits{})
	exec := func(session string) string { return `{"session":"` + session + `","argv":["/bin/true"]}` }

	if code, msg, _ := postWithSession(t, hs.URL, "Execute", "other", exec("s1"), true); code != "invalid_argument" ||
		!strings.Contains(msg, SessionHeader) || !strings.Contains(msg, `"other"`) || !strings.Contains(msg, `"s1"`) {
		t.Errorf("Execute with a disagreeing header: %q %q; want invalid_argument naming %s and both sessions", code, msg, SessionHeader)
	}
	if n := h.runs(); n != 0 {
		t.Fatalf("a command ran (%d) though its header disagreed with its session", n)
	}
	for _, hdr := range []string{"s1", ""} {
		if code, msg, _ := postWithSession(t, hs.URL, "Execute", hdr, exec("s1"), true); code != "" {
			t.Errorf("Execute with header %q: %s %s; want it served", hdr, code, msg)
		}
	}
	// A name that is not a plain header value travels percent-encoded.
	if code, msg, _ := postWithSession(t, hs.URL, "Execute", "caf%C3%A9%201", exec("café 1"), true); code != "" {
		t.Errorf("Execute with a percent-encoded header: %s %s; want it served", code, msg)
	}
	if n := h.runs(); n != 3 {
		t.Errorf("%d commands ran; want the 3 whose header agreed or was absent", n)
	}
	if code, _, _ := postWithSession(t, hs.URL, "Execute", "s1", exec("s1"), true); code != "" {
		t.Fatal("control failed")
	}
	// A header that is not percent-encoding is refused.
	if code, msg, _ := postWithSession(t, hs.URL, "Execute", "%zz", exec("s1"), true); code != "invalid_argument" || !strings.Contains(msg, SessionHeader) {
		t.Errorf("a header that is not percent-encoded: %q %q", code, msg)
	}

	// The other server stream naming a session, checked by its handler
	// as Execute is (streamRequest).
	if code, msg, _ := postWithSession(t, hs.URL, "ReadFile", "s2", `{"session":"s1","path":"f"}`, true); code != "invalid_argument" || !strings.Contains(msg, SessionHeader) {
		t.Errorf("ReadFile with header s2: %q %q; want invalid_argument naming %s", code, msg, SessionHeader)
	}
	// The control: a header that agrees gets past the check to the
	// handler, which refuses the session itself (longer than a session
	// name may be), naming the body's field.
	long := strings.Repeat("a", 1100)
	if code, msg, _ := postWithSession(t, hs.URL, "ReadFile", long, `{"session":"`+long+`","path":"f"}`, true); code != "invalid_argument" || strings.Contains(msg, SessionHeader) || !strings.Contains(msg, "session") {
		t.Errorf("ReadFile with an agreeing header: %q %q; want it past the header check, refused by the handler", code, msg)
	}

	// Unary calls naming a session.
	for _, c := range []struct{ method, msg string }{
		{"Sessions", `{"describe":{"session":"s1"}}`},
		{"Sessions", `{"forget":{"session":"s1"}}`},
		{"Grants", `{"list":{"session":"s1"}}`},
		{"ListProcesses", `{"session":"s1"}`},
	} {
		if code, msg, _ := postWithSession(t, hs.URL, c.method, "s2", c.msg, false); code != "invalid_argument" || !strings.Contains(msg, SessionHeader) {
			t.Errorf("%s %s with header s2: %q %q; want invalid_argument naming %s", c.method, c.msg, code, msg, SessionHeader)
		}
		if code, msg, _ := postWithSession(t, hs.URL, c.method, "s1", c.msg, false); code != "" {
			t.Errorf("%s %s with header s1: %s %s; want it served", c.method, c.msg, code, msg)
		}
	}
	// A delete routed as another session's would remove this one's
	// workspace: refused before the handler (whose answer here, a host
	// that cannot delete, is the control that the header passed).
	if code, msg, _ := postWithSession(t, hs.URL, "Sessions", "s2", `{"delete":{"session":"s1"}}`, false); code != "invalid_argument" || !strings.Contains(msg, SessionHeader) {
		t.Errorf("Sessions delete with header s2: %q %q; want invalid_argument naming %s", code, msg, SessionHeader)
	}
	if code, msg, _ := postWithSession(t, hs.URL, "Sessions", "s1", `{"delete":{"session":"s1"}}`, false); code != "unimplemented" {
		t.Errorf("Sessions delete with header s1: %q %q; want it past the check (unimplemented by this host)", code, msg)
	}
	// A layered session's calls: an Apply or Discard routed as another
	// session's would change this one's host directory or drop its layer.
	for _, method := range []string{"Changes", "Diff", "Apply", "Discard"} {
		if code, msg, _ := postWithSession(t, hs.URL, method, "s2", `{"session":"s1"}`, false); code != "invalid_argument" || !strings.Contains(msg, SessionHeader) {
			t.Errorf("%s with header s2: %q %q; want invalid_argument naming %s", method, code, msg, SessionHeader)
		}
		// The control: with the header agreeing, the call gets past the
		// check to the handler (this host has no layer: not_found, no_layer).
		if code, msg, _ := postWithSession(t, hs.URL, method, "s1", `{"session":"s1"}`, false); code != "not_found" {
			t.Errorf("%s with header s1: %q %q; want it past the header check (not_found from the host)", method, code, msg)
		}
	}
	// Calls that name no session are not compared.
	if code, msg, _ := postWithSession(t, hs.URL, "Sessions", "s2", `{"list":{}}`, false); code != "" {
		t.Errorf("Sessions list with a header: %s %s; want it served", code, msg)
	}
}

// A process call's header is compared with the session of the process its
// id names.
func TestSessionHeaderOfProcessCalls(t *testing.T) {
	_, _, hs := newLimitServer(t, core.ServeLimits{})
	code, msg, body := postWithSession(t, hs.URL, "StartProcess", "p1", `{"command":{"session":"p1","argv":["/bin/true"]}}`, false)
	if code != "" {
		t.Fatalf("StartProcess: %s %s", code, msg)
	}
	if code, msg, _ := postWithSession(t, hs.URL, "StartProcess", "p2", `{"command":{"session":"p1","argv":["/bin/true"]}}`, false); code != "invalid_argument" || !strings.Contains(msg, SessionHeader) {
		t.Errorf("StartProcess with a disagreeing header: %q %q", code, msg)
	}
	var started struct{ ID string }
	if err := json.Unmarshal([]byte(body), &started); err != nil || started.ID == "" {
		t.Fatalf("StartProcess answered %s (%v)", body, err)
	}
	id := `{"id":"` + started.ID + `"}`
	if code, msg, _ := postWithSession(t, hs.URL, "WaitProcess", "p2", id, false); code != "invalid_argument" || !strings.Contains(msg, SessionHeader) || !strings.Contains(msg, `"p1"`) {
		t.Errorf("WaitProcess with another session's header: %q %q; want invalid_argument naming %s", code, msg, SessionHeader)
	}
	if code, msg, _ := postWithSession(t, hs.URL, "WaitProcess", "p1", id, false); code != "" {
		t.Errorf("WaitProcess with its own session's header: %s %s; want it served", code, msg)
	}
}

// signalHost is a pipeline whose command runs until a signal reaches it.
type signalHost struct {
	fakeHost
	got  chan driverapi.Signal
	stop chan struct{}
}

func (h *signalHost) Execute(ctx context.Context, cmd core.Command) (*core.Output, error) {
	select {
	case sig := <-cmd.Signals:
		h.got <- sig
		return &core.Output{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-h.stop:
		return &core.Output{}, nil
	}
}

// A call naming a running command by its signal_key, and an Approve, are
// compared with the session of the command (of the request it answers):
// another session in the header is refused naming the header and nothing
// reaches the command; the command's own session is served (the
// control); a key nothing runs under is left to the handler.
func TestSessionHeaderOfSignalAndApprove(t *testing.T) {
	h := &signalHost{got: make(chan driverapi.Signal, 1), stop: make(chan struct{})}
	srv, err := New(Options{Host: h, Broker: NewBroker(false, nil)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	// Before the server closes: a failed test ends the command too.
	t.Cleanup(func() { close(h.stop) })
	done := make(chan string, 1)
	go func() {
		code, _, _ := postWithSession(t, hs.URL, "Execute", "", `{"session":"s1","argv":["/bin/true"],"signal_key":"key-1"}`, true)
		done <- code
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, _, ok := srv.callSession("key-1"); ok {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("the command's call ended before it ran: %q", code)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never registered its key")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for m, body := range map[string]string{"Signal": `{"signal_key":"key-1","signal":"TERM"}`,
		"CloseStdin": `{"signal_key":"key-1"}`, "ResizeTerminal": `{"signal_key":"key-1","rows":1,"cols":1}`} {
		code, msg, _ := postWithSession(t, hs.URL, m, "s2", body, false)
		if code != "invalid_argument" || !strings.Contains(msg, SessionHeader) || !strings.Contains(msg, `"s1"`) {
			t.Fatalf("%s with another session's header: %s %q", m, code, msg)
		}
	}
	if code, msg, _ := postWithSession(t, hs.URL, "Signal", "s2", `{"signal_key":"no-such-key","signal":"TERM"}`, false); code != "not_found" {
		t.Fatalf("a key nothing runs under: %s %q", code, msg)
	}
	select {
	case sig := <-h.got:
		t.Fatalf("a refused call reached the command: %v", sig)
	default:
	}
	if code, msg, _ := postWithSession(t, hs.URL, "Signal", "s1", `{"signal_key":"key-1","signal":"TERM"}`, false); code != "" {
		t.Fatalf("the command's own session: %s %q", code, msg)
	}
	if sig := <-h.got; sig != driverapi.SignalTERM {
		t.Fatalf("the command got %v", sig)
	}
	if code := <-done; code != "" {
		t.Fatalf("the command's call: %s", code)
	}

	// Approve: the session of the pending request.
	ids := make(chan string, 1)
	ctx := withOwnApprover(context.Background(), func(r *hostv1.ApprovalRequest) error { ids <- r.GetId(); return nil })
	outcome := make(chan driverapi.ApprovalOutcome, 1)
	go func() {
		o, _ := srv.broker.RequestApproval(ctx, driverapi.ApprovalRequest{SessionID: "s1", Program: "/bin/true"})
		outcome <- o
	}()
	id := <-ids
	if code, msg, _ := postWithSession(t, hs.URL, "Approve", "s2", `{"id":"`+id+`","approved":true}`, false); code != "invalid_argument" || !strings.Contains(msg, SessionHeader) {
		t.Fatalf("Approve with another session's header: %s %q", code, msg)
	}
	if code, msg, _ := postWithSession(t, hs.URL, "Approve", "s1", `{"id":"`+id+`","approved":true}`, false); code != "" {
		t.Fatalf("Approve with the request's session: %s %q", code, msg)
	}
	if o := <-outcome; o != driverapi.ApprovalApproved {
		t.Fatalf("outcome %v, want approved", o)
	}
}

// The interceptors check a unary call's request; a server stream's handler
// checks its own (streamRequest), so that no wrapped connection lies on
// the way of every message it sends. These are the streaming calls, each
// of which calls streamRequest first: one added to the service must too,
// and join this list.
func TestStreamingHandlersCheckTheirRequest(t *testing.T) {
	var got []string
	methods := hostv1.File_host_proto.Services().ByName("Service").Methods()
	for i := range methods.Len() {
		m := methods.Get(i)
		if m.IsStreamingClient() {
			t.Errorf("%s streams from the client: the interceptors check no such stream's messages", m.Name())
		}
		if m.IsStreamingServer() {
			got = append(got, string(m.Name()))
		}
	}
	slices.Sort(got)
	if want := []string{"Approvals", "Execute", "ReadFile"}; !slices.Equal(got, want) {
		t.Errorf("server streams %q, want %q: a new one checks its request with streamRequest first", got, want)
	}
}
