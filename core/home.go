package core

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// A session's private HOME (sandbox.session.home = "session"): a directory
// of its own under <workspace_root>/.homes/, so that what tools keep in
// HOME (.cache, .config, .gitconfig) stays out of the workspace, lasts
// from one command of the session to the next, and is gone with the
// session (ForgetSession). It reaches a driver that reports
// Details[driverapi.DetailProfileHome] as ProfileRequest.Home, a writable
// directory without protected entries (no host tool opens it as a
// project, and setting them up costs every command); any other driver gets
// it as one more fs_write path of the profile request, bound writable with
// the mechanism it already has for write grants (protected entries
// included). It is not a grant, and is not asked about or kept.
//
// The homes directory counts as the sandbox's own state: no grant and no
// named workspace may reach it (reachesOwnState), so one session's command
// cannot read or write another session's HOME. A HOME that would hold the
// grant store or the audit log is refused.

// homesRoot is the directory of the private HOMEs, or "" when HOME is the
// workspace.
func (s *WorkspaceSandbox) homesRoot() string {
	if s.cfg.Sandbox.Session.Home != HomeSession {
		return ""
	}
	return filepath.Join(s.cfg.Sandbox.WorkspaceRoot, HomesDirName)
}

// HomePath is the directory of a session's private HOME (created on first
// use), or its workspace when sandbox.session.home is "workspace".
func (s *WorkspaceSandbox) HomePath(sessionID string) (string, error) {
	if err := validateSessionID(sessionID); err != nil {
		return "", err
	}
	sess, err := s.session(sessionID)
	if err != nil {
		return "", err
	}
	if s.homesRoot() == "" {
		return s.workspaceDir(sess)
	}
	return s.homeDir(sess)
}

// homeDir creates the session's private HOME on first use and returns its
// canonical path.
func (s *WorkspaceSandbox) homeDir(sess *session) (string, error) {
	// Another process (`aleph-sandbox session forget`) may have removed
	// the HOME since it was made: it is made again, empty, rather than
	// handed to the driver missing.
	sess.mu.RLock()
	if sess.homeReady && isDir(sess.home) {
		d := sess.home
		sess.mu.RUnlock()
		return d, nil
	}
	sess.mu.RUnlock()
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.homeReady && isDir(sess.home) {
		return sess.home, nil
	}
	sess.homeReady = false
	root := s.homesRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", &WorkspaceError{Path: root, Err: err}
	}
	// Both levels must be real directories: a symlink planted in their
	// place would move every session's HOME (or this one) anywhere.
	if st, err := os.Lstat(root); err != nil || !st.IsDir() {
		return "", &WorkspaceError{Path: root, Err: errors.New("not a directory (symlinks are refused)")}
	}
	dir := filepath.Join(root, SessionDirName(sess.id))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", &WorkspaceError{Path: dir, Err: err}
	}
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return "", &WorkspaceError{Path: dir, Err: errors.New("not a directory (symlinks are refused)")}
	}
	canon, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", &WorkspaceError{Path: dir, Err: err}
	}
	for _, o := range s.ownStateFiles() {
		if pathsOverlap(canon, o) {
			return "", &WorkspaceError{Path: canon, Err: fmt.Errorf("a session's HOME must not hold %q, where the sandbox keeps its own state (grants, audit): move sandbox.workspace_root or that file", o)}
		}
	}
	sess.home, sess.homeReady = canon, true
	return canon, nil
}

func isDir(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.IsDir()
}

// childHome is the HOME of a command of sess running in ws: the session's
// private HOME, which must lie outside ws, or ws itself.
func (s *WorkspaceSandbox) childHome(sess *session, ws string) (string, error) {
	if s.homesRoot() == "" {
		return ws, nil
	}
	home, err := s.homeDir(sess)
	if err != nil {
		return "", err
	}
	if pathsOverlap(home, ws) {
		return "", &InvalidCommandError{Field: "workspace", Reason: fmt.Sprintf("%q and the session's HOME %q overlap; the HOME is kept outside the workspace", ws, home)}
	}
	return home, nil
}

// forgetHome removes a forgotten session's private HOME.
func (s *WorkspaceSandbox) forgetHome(sessionID string) {
	if err := RemoveSessionHome(s.cfg, sessionID); err != nil {
		s.logger.Error("removing the session's HOME failed", "session", sessionID, "error", err)
	}
}

// RemoveSessionHome removes a session's private HOME as cfg places it
// (nothing when sandbox.session.home is "workspace", or when it does not
// exist): what ForgetSession does to the HOME, for a host that forgets a
// session without building a sandbox (`aleph-sandbox session forget`).
// Tools leave read-only directories there (Go's module cache), which the
// owner may still remove once it makes them writable again; symlinks are
// never followed.
func RemoveSessionHome(cfg Config, sessionID string) error {
	if cfg.Sandbox.Session.Home != HomeSession || cfg.Sandbox.WorkspaceRoot == "" {
		return nil
	}
	root := filepath.Join(cfg.Sandbox.WorkspaceRoot, HomesDirName)
	if st, err := os.Lstat(root); err != nil || !st.IsDir() {
		return nil
	}
	dir := filepath.Join(root, SessionDirName(sessionID))
	// By descriptor, never by path (removetree_unix.go): a command of the
	// session may still be running, and a link it plants or swaps in
	// must not take a chmod or an unlink out of the HOME.
	if err := removeTree(dir); err != nil {
		return &WorkspaceError{Path: dir, Err: err}
	}
	return nil
}

// ownStateFiles are the grant store's directory and the audit log.
func (s *WorkspaceSandbox) ownStateFiles() []string {
	var own []string
	if s.store != nil && s.store.Dir() != "" {
		own = append(own, s.store.Dir())
	}
	if s.cfg.Sandbox.AuditLog != "" {
		own = append(own, s.cfg.Sandbox.AuditLog)
	}
	return own
}
