package mcpserver

import (
	"errors"
	"fmt"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/wsfs"
)

// TestFileErrorReasonCodes: a file tool's failure carries the reason code
// a caller branches on, the service's files API's for the same failure: a
// refused session or named workspace is the caller's request
// (invalid_request, not file_failed), a protected entry names the entry,
// core's own failures keep core's codes, and only an error nobody typed is
// file_failed.
func TestFileErrorReasonCodes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		code      string
		wantEntry string
	}{
		{"named workspace refused", fmt.Errorf("files: %w", &core.InvalidCommandError{Field: "workspace", Reason: "it is another session's workspace"}), "invalid_request", ""},
		{"protected entry", &wsfs.Error{Code: wsfs.CodeProtected, Entry: ".git"}, "protected_entry", ".git"},
		{"invalid path", &wsfs.Error{Code: wsfs.CodeInvalid}, "invalid_request", ""},
		{"limit", &core.LimitError{Limit: core.LayerLimitKey, Reason: "full"}, string(core.ReasonResourceExhausted), ""},
		{"runtime closed", fmt.Errorf("read: %w", core.ErrClosed), string(core.ReasonClosed), ""},
		{"untyped", errors.New("disk on fire"), "file_failed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := fileError(tc.err)
			if fe.ReasonCode != tc.code || fe.Entry != tc.wantEntry || fe.Error != tc.err.Error() {
				t.Fatalf("%+v, want code %q entry %q and the error's text", fe, tc.code, tc.wantEntry)
			}
		})
	}
}
