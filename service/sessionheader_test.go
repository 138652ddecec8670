package service

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
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
