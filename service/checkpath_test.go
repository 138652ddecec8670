package service

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// A path that reaches one of the service's own directories is refused,
// and the message says which way it reaches it: inside the directory (its
// grants, its socket) or around it. A sibling whose name shares the
// directory's prefix reaches nothing and is the control.
func TestCheckPathSaysHowAPathReachesTheService(t *testing.T) {
	root := t.TempDir()
	own := filepath.Join(root, "state")
	srv, err := New(Options{Host: &fakeHost{}, Broker: NewBroker(false, nil), Protected: []string{own}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, how string
	}{
		{filepath.Join(own, "grants.json"), "lies inside"},
		{own, "lies inside"},
		{root, "contains"},
		{"/", "contains"},
		{own + "-sibling", ""},
	} {
		err := srv.checkPath("read[0]", tc.path)
		if tc.how == "" {
			if err != nil {
				t.Errorf("%s: %v, want no refusal", tc.path, err)
			}
			continue
		}
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodePermissionDenied || !strings.Contains(err.Error(), tc.how+" the service's own directory") {
			t.Errorf("%s: %v, want PermissionDenied saying %q", tc.path, err, tc.how)
		}
	}
}
