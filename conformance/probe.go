package conformance

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
)

// init makes every binary that links this package usable as the probe:
// started with the probe's magic first argument it runs the probe and
// exits before main. That is how the suite runs without a separate probe
// binary (Config.Probe), e.g. from the aleph-sandbox command or a driver's
// own go test binary; no other argument list is affected.
//
// It ends with syscall.Exit, not os.Exit: a host built with -race would
// otherwise sleep a second in the race runtime's exit hook on every probe
// command. The probe's output is unbuffered, so nothing is lost.
func init() {
	if len(os.Args) > 1 && os.Args[1] == probe.Magic {
		syscall.Exit(probe.Main(os.Args[2:]))
	}
}

// suiteProbe makes the suite's own copy of the probe once: the cases link
// (or copy) it into their workspaces, and a large host executable is then
// copied only once per run.
func (s *suite) suiteProbe() (string, error) {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probe != "" || s.probeErr != nil {
		return s.probe, s.probeErr
	}
	src := s.cfg.Probe
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			s.probeErr = fmt.Errorf("finding the running executable to use as the probe: %w (set Config.Probe)", err)
			return "", s.probeErr
		}
		src = exe
	}
	dir := s.cfg.TempDir
	if dir == "" {
		dir = os.TempDir()
	}
	d, err := os.MkdirTemp(dir, "aleph-conformance-probe-")
	if err != nil {
		s.probeErr = err
		return "", err
	}
	s.probeDir = d
	dst := filepath.Join(d, s.progs.probeName)
	if err := copyFile(src, dst); err != nil {
		s.probeErr = fmt.Errorf("copying the probe %s: %w", src, err)
		return "", s.probeErr
	}
	s.probe = dst
	return dst, nil
}

// placeProbe puts the probe into dir (a workspace) and returns its path.
// A hard link is tried first; a copy is the fallback across file systems.
func (s *suite) placeProbe(dir string) (string, error) {
	src, err := s.suiteProbe()
	if err != nil {
		return "", err
	}
	// Concurrent commands of one case place it once.
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	dst := filepath.Join(dir, s.progs.probeName)
	if _, err := os.Lstat(dst); err == nil {
		return dst, nil
	}
	// Windows gets a copy: a driver there grants its sandbox access by
	// changing the ACLs of workspace files, and through a hard link it
	// would change the suite's master copy (and every other link) too.
	if s.progs.posix() && os.Link(src, dst) == nil {
		return dst, nil
	}
	if err := copyFile(src, dst); err != nil {
		return "", fmt.Errorf("placing the probe in %s: %w", dir, err)
	}
	return dst, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
