package conformance

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
)

// ServeProbe makes the calling program the suite's probe when args (its
// os.Args) ask for it: started with the probe's magic first argument it
// runs the probe and exits; with any other argument list it returns at once
// and does nothing. A program that runs the suite without Config.Probe (the
// suite then uses the running executable as the probe: the aleph-sandbox
// command, a driver's own go test binary) calls it first thing in main or
// TestMain. Linking this package alone changes nothing in a program.
//
// It ends with syscall.Exit, not os.Exit: a host built with -race would
// otherwise sleep a second in the race runtime's exit hook on every probe
// command. The probe's output is unbuffered, so nothing is lost.
func ServeProbe(args []string) {
	if len(args) > 1 && args[1] == probe.Magic {
		syscall.Exit(probe.Main(args[2:]))
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
