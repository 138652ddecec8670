//go:build windows

package appcontainer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// The Win32 side of placeholders (see placeholder.go for the design).

// stillActive is STILL_ACTIVE, the exit code of a running process.
const stillActive = 259

// defaultStateDir is the driver's state directory: under the user's
// local application data, which only the user (and SYSTEM and the
// administrators) can reach, and which no AppContainer is granted.
func defaultStateDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "aleph-sandbox", "driver")
	}
	return filepath.Join(os.TempDir(), "aleph-sandbox-driver")
}

type winPlaceholders struct {
	owner string
	// sddl is the placeholder's security descriptor, built once for the
	// user this driver runs as.
	sddlOnce sync.Once
	sddl     string
	sddlErr  error
}

func osPlaceholders() PlaceholderFS {
	w := &winPlaceholders{}
	w.owner = strconv.FormatUint(uint64(windows.GetCurrentProcessId()), 10) + "-" + strconv.FormatInt(processStart(windows.CurrentProcess()), 10)
	return w
}

// processStart is the creation time of a process (100 ns units), 0 when
// it cannot be read.
func processStart(h windows.Handle) int64 {
	var creation, exit, kernel, user windows.Filetime
	if windows.GetProcessTimes(h, &creation, &exit, &kernel, &user) != nil {
		return 0
	}
	return int64(creation.HighDateTime)<<32 | int64(creation.LowDateTime)
}

func (w *winPlaceholders) Owner() string { return w.owner }

// OwnerGone: the process is gone, has exited, or the pid is another
// process now (its start time differs). A process that cannot be opened
// for another reason is taken as alive.
func (w *winPlaceholders) OwnerGone(owner string) bool {
	pidS, startS, ok := strings.Cut(owner, "-")
	pid, err1 := strconv.ParseUint(pidS, 10, 32)
	start, err2 := strconv.ParseInt(startS, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return false
	}
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return errors.Is(err, windows.ERROR_INVALID_PARAMETER)
	}
	defer windows.CloseHandle(h)
	var code uint32
	if windows.GetExitCodeProcess(h, &code) == nil && code != stillActive {
		return true
	}
	got := processStart(h)
	return got != 0 && got != start
}

// placeholderSDDL: a protected DACL (nothing inherited from the
// workspace) giving the user and SYSTEM full control and ALL APPLICATION
// PACKAGES read and execute.
func (w *winPlaceholders) placeholderSDDL() (string, error) {
	w.sddlOnce.Do(func() {
		tok, err := windows.OpenCurrentProcessToken()
		if err != nil {
			w.sddlErr = fmt.Errorf("OpenProcessToken: %w", err)
			return
		}
		defer tok.Close()
		u, err := tok.GetTokenUser()
		if err != nil {
			w.sddlErr = fmt.Errorf("GetTokenUser: %w", err)
			return
		}
		w.sddl = "D:P(A;OICI;FA;;;" + u.User.Sid.String() + ")(A;OICI;FA;;;SY)(A;OICI;0x1200a9;;;AC)"
	})
	return w.sddl, w.sddlErr
}

type winHold struct {
	once sync.Once
	h    windows.Handle
	id   FileID
}

func (h *winHold) ID() FileID { return h.id }

func (h *winHold) Close() error {
	var err error
	h.once.Do(func() { err = windows.CloseHandle(h.h) })
	return err
}

// openDir opens path itself (never what a reparse point names) with
// access and share, mapping the errors placeholder.go reads.
func openDir(path string, access, share uint32) (windows.Handle, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return 0, err
	}
	h, err := windows.CreateFile(p, access, share, nil, windows.OPEN_EXISTING,
		windows.FILE_FLAG_BACKUP_SEMANTICS|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	switch {
	case err == nil:
		return h, nil
	case errors.Is(err, windows.ERROR_FILE_NOT_FOUND), errors.Is(err, windows.ERROR_PATH_NOT_FOUND):
		return 0, fs.ErrNotExist
	case errors.Is(err, windows.ERROR_SHARING_VIOLATION), errors.Is(err, windows.ERROR_ACCESS_DENIED):
		// A DELETE handle or a pending delete (which reads as access
		// denied) is a placeholder being removed.
		return 0, fmt.Errorf("%w: open %s: %w", ErrPlaceholderBusy, path, err)
	}
	return 0, fmt.Errorf("open %s: %w", path, err)
}

// fileID reads h's ID and whether it is a plain directory.
func fileID(h windows.Handle) (FileID, bool, error) {
	var fi windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(h, &fi); err != nil {
		return "", false, fmt.Errorf("GetFileInformationByHandle: %w", err)
	}
	plainDir := fi.FileAttributes&windows.FILE_ATTRIBUTE_DIRECTORY != 0 && fi.FileAttributes&windows.FILE_ATTRIBUTE_REPARSE_POINT == 0
	return FileID(fmt.Sprintf("%08x-%08x%08x", fi.VolumeSerialNumber, fi.FileIndexHigh, fi.FileIndexLow)), plainDir, nil
}

func (w *winPlaceholders) Create(path string) (PlaceholderHold, error) {
	sddl, err := w.placeholderSDDL()
	if err != nil {
		return nil, err
	}
	sd, err := windows.SecurityDescriptorFromString(sddl)
	if err != nil {
		return nil, fmt.Errorf("placeholder security descriptor: %w", err)
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	sa := &windows.SecurityAttributes{Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), SecurityDescriptor: sd}
	if err := windows.CreateDirectory(p, sa); err != nil {
		switch {
		case errors.Is(err, windows.ERROR_ALREADY_EXISTS), errors.Is(err, windows.ERROR_FILE_EXISTS):
			return nil, fs.ErrExist
		case errors.Is(err, windows.ERROR_ACCESS_DENIED):
			// Also what a name whose delete is pending answers.
			return nil, fmt.Errorf("%w: CreateDirectory %s: %w", ErrPlaceholderBusy, path, err)
		}
		return nil, fmt.Errorf("CreateDirectory %s: %w", path, err)
	}
	h, err := w.Hold(path)
	if err != nil {
		_ = windows.RemoveDirectory(p)
		return nil, err
	}
	return h, nil
}

// Hold opens path for reading without FILE_SHARE_DELETE: while the
// handle is open nobody can open it for DELETE (remove or rename it).
// FILE_LIST_DIRECTORY is needed for the share mode to count at all.
func (w *winPlaceholders) Hold(path string) (PlaceholderHold, error) {
	h, err := openDir(path, windows.FILE_LIST_DIRECTORY|windows.FILE_READ_ATTRIBUTES|windows.SYNCHRONIZE,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE)
	if err != nil {
		return nil, err
	}
	id, plainDir, err := fileID(h)
	if err == nil && !plainDir {
		err = ErrPlaceholderChanged
	}
	if err != nil {
		windows.CloseHandle(h)
		return nil, err
	}
	return &winHold{h: h, id: id}, nil
}

func (w *winPlaceholders) Identify(path string) (FileID, error) {
	h, err := openDir(path, windows.FILE_READ_ATTRIBUTES, windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE)
	if err != nil {
		return "", err
	}
	defer windows.CloseHandle(h)
	id, _, err := fileID(h)
	return id, err
}

func (w *winPlaceholders) Remove(path string, id FileID, fresh bool) error {
	h, err := openDir(path, windows.DELETE|windows.FILE_READ_ATTRIBUTES|windows.READ_CONTROL,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(h)
	got, plainDir, err := fileID(h)
	if err != nil {
		return err
	}
	if got != id || !plainDir {
		return ErrPlaceholderChanged
	}
	if fresh {
		same, err := w.sameDACL(h)
		if err != nil {
			return err
		}
		if !same {
			return ErrPlaceholderChanged
		}
	}
	del := byte(1) // FILE_DISPOSITION_INFO.DeleteFile: removed when the handle closes
	if err := windows.SetFileInformationByHandle(h, windows.FileDispositionInfo, &del, 1); err != nil {
		if errors.Is(err, windows.ERROR_DIR_NOT_EMPTY) {
			return ErrPlaceholderChanged
		}
		return fmt.Errorf("delete placeholder %s: %w", path, err)
	}
	return nil
}

// sameDACL: h's DACL is protected and holds exactly the entries Create
// gives, both rendered by the same conversion. The control flags after
// "D:" are not compared beyond protection: the system may add
// auto-inheritance flags when it stores a descriptor.
func (w *winPlaceholders) sameDACL(h windows.Handle) (bool, error) {
	sddl, err := w.placeholderSDDL()
	if err != nil {
		return false, err
	}
	want, err := windows.SecurityDescriptorFromString(sddl)
	if err != nil {
		return false, err
	}
	got, err := windows.GetSecurityInfo(h, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return false, fmt.Errorf("read placeholder ACL: %w", err)
	}
	ctl, _, err := got.Control()
	if err != nil {
		return false, fmt.Errorf("read placeholder ACL: %w", err)
	}
	entries := func(s string) string {
		if i := strings.IndexByte(s, '('); i >= 0 {
			return s[i:]
		}
		return ""
	}
	return ctl&windows.SE_DACL_PROTECTED != 0 && entries(got.String()) != "" && entries(got.String()) == entries(want.String()), nil
}

// StartJanitor starts this binary as the janitor of this process (see
// JanitorCommand): detached, in a process group of its own, out of this
// process's job when the job allows breaking away (else inside it, where
// it still outlives a driver killed alone). Its working directory is the
// system directory, never a workspace or the state directory (its open
// directory handle would keep the user from removing either). It is not
// waited for.
func (w *winPlaceholders) StartJanitor(stateDir string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("janitor: %w", err)
	}
	sysDir, err := windows.GetSystemDirectory()
	if err != nil {
		return fmt.Errorf("janitor: %w", err)
	}
	start := func(flags uint32) error {
		cmd := exec.Command(exe, JanitorCommand, "--state", stateDir, "--owner", w.owner)
		cmd.Dir = sysDir
		cmd.Env = []string{"SystemRoot=" + os.Getenv("SystemRoot")}
		cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: flags}
		if err := cmd.Start(); err != nil {
			return err
		}
		return cmd.Process.Release()
	}
	base := uint32(windows.CREATE_NEW_PROCESS_GROUP | windows.DETACHED_PROCESS)
	if err := start(base | windows.CREATE_BREAKAWAY_FROM_JOB); err == nil {
		return nil
	}
	if err := start(base); err != nil {
		return fmt.Errorf("janitor: %w", err)
	}
	return nil
}

// JanitorMain is the janitor's main (JanitorCommand's arguments): it
// waits for the driver process the owner tag names, then sweeps.
func JanitorMain(args []string) int {
	stateDir, owner, err := parseJanitorArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	pidS, startS, _ := strings.Cut(owner, "-")
	pid, _ := strconv.ParseUint(pidS, 10, 32)
	start, _ := strconv.ParseInt(startS, 10, 64)
	h, err := windows.OpenProcess(windows.SYNCHRONIZE|windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err == nil {
		// A pid reused by another process is not the driver: it has
		// ended already.
		if processStart(h) == start {
			_, _ = windows.WaitForSingleObject(h, windows.INFINITE)
		}
		windows.CloseHandle(h)
	}
	janitorSweep(osPlaceholders(), stateDir)
	return 0
}
