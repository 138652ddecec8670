package core

import (
	"errors"
	"strings"
	"testing"
)

// An empty session is refused with a reason that names no Go API (a CLI
// shows it beside its own flag) and a Hint, in Error, for Go callers.
func TestEmptySessionReasonAndHint(t *testing.T) {
	err := validateCommand("", Command{Program: "echo"})
	var ie *InvalidCommandError
	if !errors.As(err, &ie) || ie.Field != "session_id" || ie.Reason != "empty" {
		t.Fatalf("got %T %v", err, err)
	}
	if !strings.Contains(ie.Hint, "WithSession") || !strings.Contains(err.Error(), ie.Hint) {
		t.Errorf("hint %q, error %q: want the Go hint in Error only", ie.Hint, err)
	}
	if err := validateCommand("s", Command{Program: "echo"}); err != nil {
		t.Errorf("control: a session and a program: %v", err)
	}
}
