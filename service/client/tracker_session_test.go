package client

import (
	"context"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// TestTrackerSessionFromContext: a call whose body names no session (a
// signal by key) carries the header of the session its context names; a
// call naming one carries that one, whatever the context says; without
// either, no header (the control).
func TestTrackerSessionFromContext(t *testing.T) {
	tr := NewTracker()
	send := func(ctx context.Context, msg any) map[string]string {
		h := map[string]string{}
		tr.before(ctx, msg, func(k, v string) { h[k] = v })
		return h
	}
	ctx := WithSession(context.Background(), "s 1")
	if h := send(ctx, &hostv1.SignalRequest{SignalKey: "k", Signal: "TERM"}); h[service.SessionHeader] != "s%201" {
		t.Errorf("signal with a session in ctx: headers %v", h)
	}
	if h := send(ctx, &hostv1.WriteStdinRequest{SignalKey: "k"}); h[service.SessionHeader] != "s%201" {
		t.Errorf("write stdin with a session in ctx: headers %v", h)
	}
	if h := send(ctx, &hostv1.ExecuteRequest{Session: "other"}); h[service.SessionHeader] != "other" {
		t.Errorf("a body naming a session: headers %v", h)
	}
	if h := send(context.Background(), &hostv1.SignalRequest{SignalKey: "k"}); len(h) != 0 {
		t.Errorf("no session anywhere: headers %v", h)
	}
}

// TestTrackerProcessCallsCarryTheirSession: a process started through the
// tracker is remembered with its session, so its calls by id carry that
// session's header and incarnation; an unknown process's calls carry none
// (the control), and a forgotten session's processes are forgotten too.
func TestTrackerProcessCallsCarryTheirSession(t *testing.T) {
	tr := NewTracker()
	send := func(msg any) (map[string]string, string) {
		h := map[string]string{}
		s := tr.before(context.Background(), msg, func(k, v string) { h[k] = v })
		return h, s
	}
	// The start names the session in its body; its answer names the id.
	if _, s := send(&hostv1.StartProcessRequest{Command: &hostv1.ExecuteRequest{Session: "s 1"}}); s != "s 1" {
		t.Fatalf("start: session %q", s)
	}
	if err := tr.after("s 1", &hostv1.StartProcessResponse{Id: "p1", SessionIncarnation: "inc1"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, msg := range []any{
		&hostv1.WriteProcessRequest{Id: "p1"}, &hostv1.CloseProcessStdinRequest{Id: "p1"},
		&hostv1.ReadProcessRequest{Id: "p1"}, &hostv1.SignalProcessRequest{Id: "p1"}, &hostv1.WaitProcessRequest{Id: "p1"},
		&hostv1.ResizeProcessRequest{Id: "p1"},
	} {
		h, s := send(msg)
		if h[service.SessionHeader] != "s%201" || h[service.IncarnationHeader] != "inc1" || s != "s 1" {
			t.Errorf("%T: headers %v, session %q", msg, h, s)
		}
	}
	if h, _ := send(&hostv1.ReadProcessRequest{Id: "other"}); len(h) != 0 {
		t.Errorf("an unknown process: headers %v", h)
	}
	tr.Forget("s 1")
	if h, _ := send(&hostv1.ReadProcessRequest{Id: "p1"}); len(h) != 0 {
		t.Errorf("a forgotten session's process: headers %v", h)
	}
}
