//go:build windows

package appcontainer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// winPlatform runs commands with the Win32 API. DACL and label
// read-modify-write cycles are serialised (lockACL): two commands in one
// workspace must not lose each other's entries.
type winPlatform struct {
	mu        sync.Mutex
	labelRefs map[string]int // fs_write paths labelled Low, by live commands of this process
	lockPath  string         // the lock file shared with the user's other driver processes
}

func osPlatform(stateDir string) Platform {
	return &winPlatform{labelRefs: map[string]int{}, lockPath: filepath.Join(stateDir, "acl.lock")}
}

// lockACL serialises DACL and label changes with the other commands of
// this driver (mu) and of every other driver process of the user (an
// exclusive LockFileEx on a file in the state directory: each CLI command
// runs a driver of its own). Without it two merges into one DACL could
// lose an entry: a lost DENY on .git, with the command's inherited grant
// from the workspace still there, would let that command write .git.
func (p *winPlatform) lockACL() (unlock func(), err error) {
	p.mu.Lock()
	fail := func(err error) (func(), error) {
		p.mu.Unlock()
		return nil, fmt.Errorf("ACL lock %s: %w", p.lockPath, err)
	}
	if err := os.MkdirAll(filepath.Dir(p.lockPath), 0o700); err != nil {
		return fail(err)
	}
	f, err := os.OpenFile(p.lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fail(err)
	}
	h := windows.Handle(f.Fd())
	ol := new(windows.Overlapped)
	if err := windows.LockFileEx(h, windows.LOCKFILE_EXCLUSIVE_LOCK, 0, 1, 0, ol); err != nil {
		f.Close()
		return fail(err)
	}
	return func() {
		_ = windows.UnlockFileEx(h, 0, 1, 0, ol)
		f.Close()
		p.mu.Unlock()
	}, nil
}

// underACLLock runs undo under the ACL lock; if the lock cannot be had
// (its file gone), under this process's lock alone: an undo is never
// skipped.
func (p *winPlatform) underACLLock(undo func()) {
	unlock, err := p.lockACL()
	if err != nil {
		p.mu.Lock()
		unlock = p.mu.Unlock
	}
	defer unlock()
	undo()
}

func (p *winPlatform) IsFile(path string) bool { return isRegularFile(path) }

// newCapabilitySID is a fresh restricted-tier SID (NewCapabilitySID).
func newCapabilitySID() (*windows.SID, error) {
	str, err := NewCapabilitySID(rand.Reader)
	if err != nil {
		return nil, err
	}
	return windows.StringToSid(str)
}

func uniqueProfileName() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "aleph-sandbox." + hex.EncodeToString(b[:]), nil
}

// Probe sets each tier up and tears it down again, running nothing.
func (p *winPlatform) Probe(_ context.Context, t Tier) error {
	switch t {
	case TierAppContainer:
		name, err := uniqueProfileName()
		if err != nil {
			return err
		}
		sid, err := createAppContainerProfile(name, "aleph-sandbox probe", "aleph-sandbox capability probe")
		if err != nil {
			return err
		}
		windows.FreeSid(sid)
		return deleteAppContainerProfile(name)
	case TierRestrictedToken:
		capSID, err := newCapabilitySID()
		if err != nil {
			return err
		}
		tok, err := restrictedLowToken(capSID)
		if err != nil {
			return err
		}
		return tok.Close()
	case TierJobObject:
		job, err := newJob(Plan{ActiveProcessLimit: 1})
		if err != nil {
			return err
		}
		return windows.CloseHandle(job)
	}
	return fmt.Errorf("unknown tier %d", int(t))
}

// Launch runs l in tier t. Everything up to the resumed child is setup;
// its failure undoes what was done and returns a *SetupError.
func (p *winPlatform) Launch(ctx context.Context, t Tier, l Launch, streams driverapi.Streams) (driverapi.Exit, error) {
	setupErr := func(step string, err error) error { return &SetupError{Tier: t, Step: step, Err: err} }
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer cleanup()

	var token windows.Token
	var secCaps *securityCapabilities
	var trustee *windows.SID
	switch t {
	case TierAppContainer:
		name, err := uniqueProfileName()
		if err != nil {
			return driverapi.Exit{}, setupErr("profile name", err)
		}
		sid, err := createAppContainerProfile(name, "aleph-sandbox command", "aleph-sandbox command sandbox")
		if err != nil {
			return driverapi.Exit{}, setupErr("create AppContainer profile", err)
		}
		cleanups = append(cleanups, func() { windows.FreeSid(sid); _ = deleteAppContainerProfile(name) })
		trustee = sid
		caps := make([]windows.SIDAndAttributes, 0, len(l.Plan.CapabilitySIDs))
		for _, s := range l.Plan.CapabilitySIDs {
			cs, err := windows.StringToSid(s)
			if err != nil {
				return driverapi.Exit{}, setupErr("capability SID "+s, err)
			}
			caps = append(caps, windows.SIDAndAttributes{Sid: cs, Attributes: windows.SE_GROUP_ENABLED})
		}
		secCaps = &securityCapabilities{AppContainerSid: sid, CapabilityCount: uint32(len(caps))}
		if len(caps) > 0 {
			secCaps.Capabilities = &caps[0]
		}
	case TierRestrictedToken:
		capSID, err := newCapabilitySID()
		if err != nil {
			return driverapi.Exit{}, setupErr("capability SID", err)
		}
		tok, err := restrictedLowToken(capSID)
		if err != nil {
			return driverapi.Exit{}, setupErr("restricted token", err)
		}
		cleanups = append(cleanups, func() { tok.Close() })
		token = tok
		trustee = capSID
	}

	if err := p.applySetup(l.Setup, trustee, &cleanups); err != nil {
		return driverapi.Exit{}, setupErr("file-system setup", err)
	}

	job, err := newJob(l.Plan)
	if err != nil {
		return driverapi.Exit{}, setupErr("job object", err)
	}
	// Closing the job kills whatever is left in it (KILL_ON_JOB_CLOSE).
	cleanups = append(cleanups, func() { windows.CloseHandle(job) })

	child, err := startSuspended(t, l, token, secCaps)
	if err != nil {
		return driverapi.Exit{}, setupErr("create process", err)
	}
	if err := windows.AssignProcessToJobObject(job, child.process); err != nil {
		_ = windows.TerminateProcess(child.process, 1)
		child.close()
		return driverapi.Exit{}, setupErr("assign to job object", err)
	}
	return supervise(ctx, job, child, l, streams)
}

// applySetup applies the planned ACEs and labels for trustee, adding the
// undo steps to cleanups.
func (p *winPlatform) applySetup(s Setup, trustee *windows.SID, cleanups *[]func()) error {
	unlock, err := p.lockACL()
	if err != nil {
		return err
	}
	defer unlock()
	revoked := map[string]bool{}
	for _, a := range s.ACEs {
		if err := applyACE(a, trustee); err != nil {
			if a.BestEffort {
				continue
			}
			return err
		}
		if a.Revoke && !revoked[strings.ToLower(a.Path)] {
			revoked[strings.ToLower(a.Path)] = true
			path := a.Path
			*cleanups = append(*cleanups, func() {
				p.underACLLock(func() { _ = revokeSID(path, trustee) })
			})
		}
	}
	for _, l := range s.Labels {
		if err := applyLabel(l); err != nil {
			return err
		}
		if l.Revert {
			key := strings.ToLower(l.Path)
			p.labelRefs[key]++
			path := l.Path
			*cleanups = append(*cleanups, func() {
				p.underACLLock(func() {
					p.labelRefs[key]--
					if p.labelRefs[key] == 0 {
						delete(p.labelRefs, key)
						_ = clearLabel(path)
					}
				})
			})
		}
	}
	return nil
}

// newJob makes the Job Object every tier runs in.
func newJob(plan Plan) (windows.Handle, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, fmt.Errorf("CreateJobObject: %w", err)
	}
	var info windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_ACTIVE_PROCESS |
		windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | windows.JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
	info.BasicLimitInformation.ActiveProcessLimit = plan.ActiveProcessLimit
	if plan.MaxMemoryMB > 0 {
		// The job's total committed memory, so that max_memory_mb bounds
		// the command with all its processes, as a cgroup does on Linux;
		// a per-process cap alone could be multiplied by spawning.
		info.BasicLimitInformation.LimitFlags |= windows.JOB_OBJECT_LIMIT_JOB_MEMORY | windows.JOB_OBJECT_LIMIT_PROCESS_MEMORY
		info.JobMemoryLimit = uintptr(plan.MaxMemoryMB << 20)
		info.ProcessMemoryLimit = uintptr(plan.MaxMemoryMB << 20)
	}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(job)
		return 0, fmt.Errorf("job limits: %w", err)
	}
	ui := windows.JOBOBJECT_BASIC_UI_RESTRICTIONS{UIRestrictionsClass: windows.JOB_OBJECT_UILIMIT_DESKTOP |
		windows.JOB_OBJECT_UILIMIT_DISPLAYSETTINGS | windows.JOB_OBJECT_UILIMIT_EXITWINDOWS |
		windows.JOB_OBJECT_UILIMIT_GLOBALATOMS | windows.JOB_OBJECT_UILIMIT_HANDLES |
		windows.JOB_OBJECT_UILIMIT_READCLIPBOARD | windows.JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS |
		windows.JOB_OBJECT_UILIMIT_WRITECLIPBOARD}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectBasicUIRestrictions,
		uintptr(unsafe.Pointer(&ui)), uint32(unsafe.Sizeof(ui))); err != nil {
		windows.CloseHandle(job)
		return 0, fmt.Errorf("job UI restrictions: %w", err)
	}
	return job, nil
}

// childProc is a created, still suspended process and the parent's pipe
// ends.
type childProc struct {
	process, thread       windows.Handle
	stdin, stdout, stderr *os.File
}

func (c *childProc) close() {
	windows.CloseHandle(c.thread)
	windows.CloseHandle(c.process)
	for _, f := range []*os.File{c.stdin, c.stdout, c.stderr} {
		if f != nil {
			f.Close()
		}
	}
}

// pipe returns (parent end, child end); only the child end is inheritable.
func pipe(childReads bool) (parent *os.File, child windows.Handle, err error) {
	sa := &windows.SecurityAttributes{Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), InheritHandle: 1}
	var r, w windows.Handle
	if err := windows.CreatePipe(&r, &w, sa, 0); err != nil {
		return nil, 0, err
	}
	pEnd, cEnd := w, r
	if !childReads {
		pEnd, cEnd = r, w
	}
	if err := windows.SetHandleInformation(pEnd, windows.HANDLE_FLAG_INHERIT, 0); err != nil {
		windows.CloseHandle(r)
		windows.CloseHandle(w)
		return nil, 0, err
	}
	return os.NewFile(uintptr(pEnd), "pipe"), cEnd, nil
}

func envBlock(env []string) *uint16 {
	var b []uint16
	for _, e := range env {
		u, _ := windows.UTF16FromString(e) // NULs were refused by ValidateRunSpec
		b = append(b, u...)
	}
	if len(b) == 0 {
		b = append(b, 0)
	}
	b = append(b, 0)
	return &b[0]
}

// startSuspended creates the child, suspended, with exactly its three pipe
// handles inherited (PROC_THREAD_ATTRIBUTE_HANDLE_LIST: a concurrent launch's
// handles never leak into it) and, for the AppContainer tier, its security
// capabilities.
func startSuspended(t Tier, l Launch, token windows.Token, secCaps *securityCapabilities) (*childProc, error) {
	c := &childProc{}
	var childIn, childOut, childErr windows.Handle
	var err error
	if c.stdin, childIn, err = pipe(true); err != nil {
		return nil, err
	}
	defer windows.CloseHandle(childIn)
	if c.stdout, childOut, err = pipe(false); err != nil {
		c.close()
		return nil, err
	}
	defer windows.CloseHandle(childOut)
	if c.stderr, childErr, err = pipe(false); err != nil {
		c.close()
		return nil, err
	}
	defer windows.CloseHandle(childErr)

	attrs, err := windows.NewProcThreadAttributeList(2)
	if err != nil {
		c.close()
		return nil, err
	}
	defer attrs.Delete()
	handles := []windows.Handle{childIn, childOut, childErr}
	if err := attrs.Update(windows.PROC_THREAD_ATTRIBUTE_HANDLE_LIST, unsafe.Pointer(&handles[0]), uintptr(len(handles))*unsafe.Sizeof(handles[0])); err != nil {
		c.close()
		return nil, fmt.Errorf("handle list: %w", err)
	}
	if secCaps != nil {
		if err := attrs.Update(procThreadAttributeSecurityCapabilities, unsafe.Pointer(secCaps), unsafe.Sizeof(*secCaps)); err != nil {
			c.close()
			return nil, fmt.Errorf("security capabilities: %w", err)
		}
	}
	si := &windows.StartupInfoEx{}
	si.Cb = uint32(unsafe.Sizeof(*si))
	si.Flags = windows.STARTF_USESTDHANDLES
	si.StdInput, si.StdOutput, si.StdErr = childIn, childOut, childErr
	si.ProcThreadAttributeList = attrs.List()

	app, err := windows.UTF16PtrFromString(l.Program)
	if err != nil {
		c.close()
		return nil, err
	}
	cmd, err := windows.UTF16FromString(l.CommandLine) // CreateProcess may write to it
	if err != nil {
		c.close()
		return nil, err
	}
	dir, err := windows.UTF16PtrFromString(l.Cwd)
	if err != nil {
		c.close()
		return nil, err
	}
	// DETACHED_PROCESS: no console, so no conhost.exe to count against
	// an active-process limit of 1.
	flags := uint32(windows.CREATE_SUSPENDED | windows.CREATE_UNICODE_ENVIRONMENT |
		windows.EXTENDED_STARTUPINFO_PRESENT | windows.DETACHED_PROCESS)
	var pi windows.ProcessInformation
	env := envBlock(l.Env)
	if t == TierRestrictedToken {
		err = windows.CreateProcessAsUser(token, app, &cmd[0], nil, nil, true, flags, env, dir, &si.StartupInfo, &pi)
	} else {
		err = windows.CreateProcess(app, &cmd[0], nil, nil, true, flags, env, dir, &si.StartupInfo, &pi)
	}
	if err != nil {
		c.close()
		return nil, err
	}
	c.process, c.thread = pi.Process, pi.Thread
	return c, nil
}

// supervise resumes the child, feeds stdin, streams output within budget,
// and ends the whole job on exit, timeout or cancel.
func supervise(ctx context.Context, job windows.Handle, c *childProc, l Launch, streams driverapi.Streams) (driverapi.Exit, error) {
	defer c.close()
	start := time.Now()
	outBudget, errBudget := driverapi.StreamBudgets(l.MaxOutputBytes)
	// A nil stream is fine: BudgetWriter then only counts. Chunking for
	// the wire is done by driverapi's gRPC server.
	stdout := driverapi.NewBudgetWriter(streams.Stdout, outBudget)
	stderr := driverapi.NewBudgetWriter(streams.Stderr, errBudget)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(stdout, c.stdout) }()
	go func() { defer wg.Done(); _, _ = io.Copy(stderr, c.stderr) }()
	go func() {
		_, _ = c.stdin.Write(l.Stdin)
		c.stdin.Close()
	}()
	if _, err := windows.ResumeThread(c.thread); err != nil {
		_ = windows.TerminateJobObject(job, 1)
		wg.Wait()
		return driverapi.Exit{}, fmt.Errorf("ResumeThread: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_, _ = windows.WaitForSingleObject(c.process, windows.INFINITE)
		close(exited)
	}()
	timer := time.NewTimer(l.Timeout)
	defer timer.Stop()
	timedOut := false
	select {
	case <-exited:
	case <-timer.C:
		timedOut = true
		_ = windows.TerminateJobObject(job, 137)
		<-exited
	case <-ctx.Done():
		_ = windows.TerminateJobObject(job, 137)
		<-exited
		wg.Wait()
		return driverapi.Exit{}, ctx.Err()
	}
	// Nothing of the command outlives it: descendants still in the job
	// die now, which also closes their copies of the output pipes.
	_ = windows.TerminateJobObject(job, 137)
	wg.Wait()

	var code uint32
	if err := windows.GetExitCodeProcess(c.process, &code); err != nil {
		return driverapi.Exit{}, fmt.Errorf("GetExitCodeProcess: %w", err)
	}
	exit := driverapi.Exit{
		ExitCode:    int32(code),
		StdoutBytes: stdout.Total(),
		StderrBytes: stderr.Total(),
		Truncated:   stdout.Truncated() || stderr.Truncated(),
		Duration:    time.Since(start),
	}
	if timedOut {
		// Windows has no signals; report a timeout as the other drivers
		// do (killed, 137) so callers need no special case.
		exit.TimedOut, exit.ExitCode, exit.Signal = true, 137, 9
	}
	var creation, exitT, kernel, user windows.Filetime
	if windows.GetProcessTimes(c.process, &creation, &exitT, &kernel, &user) == nil {
		exit.Usage.UserMS = filetimeMS(user)
		exit.Usage.SystemMS = filetimeMS(kernel)
	}
	var info windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	if windows.QueryInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info)), nil) == nil {
		// Peak committed memory of the whole job: the closest Windows
		// figure to the cgroup peak the Linux driver reports.
		exit.Usage.MaxRSSKB = int64(info.PeakJobMemoryUsed / 1024)
	}
	return exit, nil
}

func filetimeMS(f windows.Filetime) int64 {
	return (int64(f.HighDateTime)<<32 | int64(f.LowDateTime)) / 10000
}
