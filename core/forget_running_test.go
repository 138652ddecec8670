package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// TestForgetSessionEndsRunningCommands: forgetting a session ends an
// Execute of it still in flight (its error says why, its audit record is
// a cancellation) before the HOME goes; a command of another session runs
// on (the control).
func TestForgetSessionEndsRunningCommands(t *testing.T) {
	fake := &drivertest.FakeDriver{}
	h := newHarness(t, testConfig(t), fake)
	type result struct {
		out *Output
		err error
	}
	start := func(session string) chan result {
		ch := make(chan result, 1)
		go func() {
			out, err := h.sb.Execute(context.Background(), Command{SessionID: session, Program: "sleep", Args: []string{"1h"}, Timeout: 2 * time.Hour})
			ch <- result{out, err}
		}()
		return ch
	}
	a, b := start("a"), start("b")
	deadline := time.Now().Add(30 * time.Second)
	for fake.Runs() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the commands did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.sb.ForgetSession("a")
	select {
	case r := <-a:
		if r.err == nil || !errors.Is(r.err, ErrSessionForgotten) {
			t.Fatalf("the forgotten session's command ended with %+v, %v; want ErrSessionForgotten", r.out, r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("ForgetSession returned while the session's command still runs")
	}
	rec := h.sink.last(t)
	if rec.SessionID != "a" || rec.Reason != ReasonCanceled {
		t.Fatalf("audit record %+v, want session a canceled", rec)
	}
	select {
	case r := <-b:
		t.Fatalf("the other session's command ended: %+v %v", r.out, r.err)
	default:
	}
	// The forgotten session comes back as a new one.
	if _, err := h.sb.Execute(context.Background(), Command{SessionID: "a", Program: "echo"}); err != nil {
		t.Fatalf("the session after forget: %v", err)
	}
	h.sb.ForgetSession("b")
	if r := <-b; !errors.Is(r.err, ErrSessionForgotten) {
		t.Fatalf("b: %v", r.err)
	}
}
