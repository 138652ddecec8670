package core

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// TestFailureReason: each kind of failure has its code, also wrapped, and
// an error of no known kind has none (a guess would mislead a script).
func TestFailureReason(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("exec: %w", err) }
	for _, tc := range []struct {
		err   error
		code  ReasonCode
		field string
	}{
		{nil, "", ""},
		{errors.New("something else"), "", ""},
		{&DeniedError{Code: ReasonApprovalDenied}, ReasonApprovalDenied, ""},
		{wrap(&InvalidCommandError{Field: "cwd", Reason: "x"}), ReasonInvalidCommand, "cwd"},
		{wrap(&ConfigError{Key: "sandbox.x", Reason: "y"}), ReasonConfigInvalid, "sandbox.x"},
		{&DriverNotFoundError{Name: "n"}, ReasonDriverNotFound, ""},
		{&DriverError{Driver: "d", Err: driverapi.ErrPluginDied}, ReasonDriverFailed, ""},
		{&HookError{Hook: "h", Err: errors.New("x")}, ReasonHookFailed, ""},
		{&HookPluginError{Hook: "h", Err: ErrHookHung}, ReasonHookFailed, ""},
		{&WorkspaceError{Path: "/w", Err: errors.New("x")}, ReasonWorkspaceFailed, ""},
		{&MediationError{Err: errors.New("x")}, ReasonMediationFailed, ""},
		{wrap(ErrSignalBeforeStart), ReasonSignalBeforeStart, ""},
		{ErrSignalEnded, ReasonSignalEnded, ""},
		{ErrClosed, ReasonClosed, ""},
		{wrap(context.Canceled), ReasonCanceled, ""},
	} {
		code, field := FailureReason(tc.err)
		if code != tc.code || field != tc.field {
			t.Errorf("%v: %q %q, want %q %q", tc.err, code, field, tc.code, tc.field)
		}
	}
}
