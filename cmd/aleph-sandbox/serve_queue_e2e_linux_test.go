//go:build linux

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// TestServeQueuesParallelCommands: with the default configuration, seven
// commands sent at once in one session (past its 4 slots) and 32 from one
// client over four sessions (past the 16 overall) all run: the ones past
// a cap wait their turn instead of being refused.
func TestServeQueuesParallelCommands(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	h.start(t, sock, "")
	c := client(sock)
	run := func(n int, session func(i int) string) []execOutcome {
		out := make([]execOutcome, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				out[i] = execute(ctx, c, &hostv1.ExecuteRequest{Session: session(i),
					Argv: []string{"/bin/sleep", "0.5"}}, nil)
			}()
		}
		wg.Wait()
		return out
	}
	check := func(what string, outs []execOutcome) {
		t.Helper()
		for i, o := range outs {
			if o.err != nil || o.result == nil || o.result.GetDenied() || o.result.GetExitCode() != 0 {
				t.Errorf("%s: command %d: err %v result %+v", what, i, o.err, o.result)
			}
		}
	}
	check("7 in one session", run(7, func(int) string { return "q7" }))
	check("32 over 4 sessions", run(32, func(i int) string { return fmt.Sprint("q32-", i%4) }))
}

// TestServeQueueBounds: past the queue's bound a command is refused at
// once, resource_exhausted naming the key; a queued command whose client
// goes away gives its place up (the next one queues where it would have
// been refused) and never runs; past the wait, resource_exhausted naming
// queue_wait_seconds.
func TestServeQueueBounds(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	h.start(t, sock, "[sandbox.rate_limit]\nmax_concurrent_per_session = 1\nmax_queued_per_session = 1\nqueue_wait_seconds = 30\n")
	c := client(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The one slot: a command that runs until its client cancels it.
	holdCtx, release := context.WithCancel(ctx)
	defer release()
	holder := make(chan execOutcome, 1)
	// A marker no other process has (a bare "120" matched other
	// processes' command lines, and the wait then passed before the
	// holder ran).
	hold := fmt.Sprintf("120.%06d", time.Now().UnixNano()%1000000)
	go func() {
		holder <- execute(holdCtx, c, &hostv1.ExecuteRequest{Session: "qb", Argv: []string{"/bin/sleep", hold}}, nil)
	}()
	waitFor(t, "the holder to run", func() bool { return markerRunning(hold) })

	// The one place in the queue, taken by a command that would leave a
	// marker file if it ever ran. Then one more is refused at once,
	// naming the bound. Whether the queued command has its place yet is
	// not visible from here: a probe that comes first takes the place
	// itself (and the command is refused); both are then tried again.
	var (
		qcancel context.CancelFunc
		queued  chan execOutcome
		refused error
	)
	waitFor(t, "a refusal past the queue's bound", func() bool {
		if queued == nil {
			var qctx context.Context
			qctx, qcancel = context.WithCancel(ctx)
			queued = make(chan execOutcome, 1)
			go func() {
				queued <- execute(qctx, c, &hostv1.ExecuteRequest{Session: "qb", Argv: []string{"/usr/bin/touch", "ran"}}, nil)
			}()
			time.Sleep(500 * time.Millisecond) // ordering only, not asserted
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		o := execute(rctx, c, &hostv1.ExecuteRequest{Session: "qb", Argv: []string{"/bin/true"}}, nil)
		refused = o.err
		select {
		case q := <-queued:
			// The probe took the place first: the command was refused.
			if connect.CodeOf(q.err) != connect.CodeResourceExhausted {
				t.Fatalf("the queued command: %v %+v", q.err, q.result)
			}
			qcancel()
			queued = nil
			return false
		default:
		}
		return connect.CodeOf(o.err) == connect.CodeResourceExhausted
	})
	if d := errDetail(t, refused); d.GetReasonCode() != "resource_exhausted" || d.GetField() != "sandbox.rate_limit.max_queued_per_session" {
		t.Fatalf("past the queue: %v %+v", refused, d)
	}
	// The queued command's client goes away: its place frees, and it
	// never runs.
	qcancel()
	if o := <-queued; o.err == nil {
		t.Fatalf("the cancelled command: %+v", o.result)
	}
	// The service sees the client go away a moment later: until then the
	// place may still be taken, and a refused attempt takes none. An
	// attempt still unanswered after a while holds the freed place.
	var next chan execOutcome
	waitFor(t, "a command to queue in the freed place", func() bool {
		next = make(chan execOutcome, 1)
		go func() {
			next <- execute(ctx, c, &hostv1.ExecuteRequest{Session: "qb", Argv: []string{"/bin/echo", "next"}}, nil)
		}()
		select {
		case o := <-next:
			if connect.CodeOf(o.err) != connect.CodeResourceExhausted {
				t.Fatalf("while the holder runs: %v %+v", o.err, o.result)
			}
			return false
		case <-time.After(1500 * time.Millisecond):
			return true
		}
	})
	// The holder ends; the command that queued in the freed place runs.
	release()
	<-holder
	if o := <-next; o.err != nil || string(o.result.GetStdout()) != "next\n" {
		t.Fatalf("the command queued after the cancel: %v %+v", o.err, o.result)
	}
	// The cancelled command never ran: no file in the session's
	// workspace (test -e runs there and fails).
	if o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "qb", Argv: []string{"/usr/bin/test", "-e", "ran"}}, nil); o.err != nil || o.result.GetExitCode() != 1 {
		t.Fatalf("the cancelled command ran after all: %v %+v", o.err, o.result)
	}
	// Control: the same command run for real leaves its file.
	if o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "qb", Argv: []string{"/usr/bin/touch", "ran"}}, nil); o.err != nil || o.result.GetExitCode() != 0 {
		t.Fatalf("touch: %v %+v", o.err, o.result)
	}
	if o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "qb", Argv: []string{"/usr/bin/test", "-e", "ran"}}, nil); o.err != nil || o.result.GetExitCode() != 0 {
		t.Fatalf("test -e after touch: %v %+v", o.err, o.result)
	}
}

// TestServeQueueWaitOver: a command still without a slot when the wait
// is over is refused, resource_exhausted naming queue_wait_seconds.
func TestServeQueueWaitOver(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	h.start(t, sock, "[sandbox.rate_limit]\nmax_concurrent_per_session = 1\nqueue_wait_seconds = 2\n")
	c := client(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	holdCtx, release := context.WithCancel(ctx)
	defer release()
	hold := fmt.Sprintf("121.%06d", time.Now().UnixNano()%1000000)
	go execute(holdCtx, c, &hostv1.ExecuteRequest{Session: "qw", Argv: []string{"/bin/sleep", hold}}, nil)
	waitFor(t, "the holder to run", func() bool { return markerRunning(hold) })
	o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "qw", Argv: []string{"/bin/true"}}, nil)
	if d := errDetail(t, o.err); d.GetReasonCode() != "resource_exhausted" || d.GetField() != "sandbox.rate_limit.queue_wait_seconds" {
		t.Fatalf("past the wait: %v %+v", o.err, d)
	}
	// Control: another session is not held up.
	if o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "other", Argv: []string{"/bin/true"}}, nil); o.err != nil || o.result.GetExitCode() != 0 {
		t.Fatalf("another session: %v %+v", o.err, o.result)
	}
}
