package core

import (
	"errors"
	"fmt"
)

// FileWorkspace is the workspace a caller names for the files API on
// session sid (as Command.Workspace names one for a command), canonical,
// after the checks Execute applies to a named workspace: an existing
// directory named without a symbolic link; not reaching the sandbox's own
// state or a protected program or file; not another session's workspace
// under the workspace root. The session is made as Execute makes it; its
// own workspace directory is not.
//
// A layered session's files are its view of its layer, which lies over
// one workspace: a name other than that workspace is refused
// (LayeredModeError), never served from the host's directory instead.
func (s *WorkspaceSandbox) FileWorkspace(sid, dir string) (string, error) {
	if err := validateCommand(sid, Command{Program: "files", Workspace: dir}); err != nil {
		return "", err
	}
	if _, err := s.session(sid); err != nil {
		return "", err
	}
	ws, err := s.namedWorkspace(sid, dir)
	if err != nil {
		return "", err
	}
	layered, err := s.SessionLayered(sid)
	if err != nil || !layered {
		return ws, err
	}
	_, l, err := s.openLayer(sid)
	switch {
	case errors.Is(err, ErrNoLayer):
		// No layer yet: none lies over another workspace.
		return ws, nil
	case err != nil:
		// A layer that cannot be read cannot show that it lies over ws:
		// refused, never served from the host's directory instead.
		return "", err
	case l.Workspace() != ws:
		return "", &LayeredModeError{Session: sid, Layered: true,
			Reason: fmt.Sprintf("its layer lies over the workspace %s, not %s; the files API reaches a layered session's view of that workspace only", l.Workspace(), ws)}
	}
	return ws, nil
}
