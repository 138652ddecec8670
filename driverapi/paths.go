package driverapi

import (
	"fmt"
	"os"
	"path/filepath"
)

// CheckCanonicalDir returns nil when p is the canonical path of an
// existing directory: absolute, clean (filepath.Clean(p) == p: no "." or
// ".." component, no doubled or trailing separator) and reached through no
// symbolic link (filepath.EvalSymlinks(p) == p). Otherwise it returns an
// *InvalidSpecError for field saying which it is not.
//
// Hosts pass ProfileRequest.Workspace, ProfileRequest.Cwd and RunSpec.Cwd
// in this form: they resolve what a user named under their own checks
// (the core refuses a workspace reached through a link, and confines a cwd
// to the workspace after resolving it). A driver that resolved a path
// again would follow whatever link a sandboxed command swapped in since,
// so a path that is not canonical is refused, never repaired.
func CheckCanonicalDir(field, p string) error {
	switch {
	case p == "":
		return &InvalidSpecError{Field: field, Reason: "empty path"}
	case !filepath.IsAbs(p):
		return &InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q is not an absolute path", p)}
	case filepath.Clean(p) != p:
		return &InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q is not canonical (it cleans to %q): pass the path the host resolved, not a spelling of it", p, filepath.Clean(p))}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return &InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q cannot be resolved: %v", p, pathErrCause(err))}
	}
	if real != p {
		return &InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q goes through a symbolic link (it resolves to %q): pass the resolved path", p, real)}
	}
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		return &InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q is not a directory", p)}
	}
	return nil
}

// CheckWorkspaceCwd is the contract's check of a command's workspace and
// working directory, shared by every driver: both canonical directories
// (CheckCanonicalDir), cwd inside the workspace. cwd "" stands for the
// workspace (a ProfileRequest may leave it out; a RunSpec may not, which
// ValidateRunSpec refuses). ProfileFor checks the request's paths, and Run
// checks RunSpec.Cwd against the profile's workspace again: the
// directories may have changed in between.
func CheckWorkspaceCwd(workspace, cwd string) error {
	if err := CheckCanonicalDir("workspace", workspace); err != nil {
		return err
	}
	if cwd == "" {
		return nil
	}
	if err := CheckCanonicalDir("cwd", cwd); err != nil {
		return err
	}
	if !PathWithin(cwd, workspace) {
		return &InvalidSpecError{Field: "cwd", Reason: fmt.Sprintf("%q is outside the workspace %q", cwd, workspace)}
	}
	return nil
}

// pathErrCause is a *PathError's cause alone (the message names the path).
func pathErrCause(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
