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
