//go:build linux

package bwrap

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The probe cache: what the host probe's trial sandboxes confirmed, kept
// across driver starts.
//
// Why: a one-shot command (the CLI's exec) starts a driver for one
// command, and the probe ran `bwrap --version` and one or two trial
// sandboxes at every start, processes of their own competing with the
// start-up for the CPU.
//
// What is kept is only confirmations, never a verdict: "on the host this
// key describes, bwrap at this path printed this version, and a trial
// sandbox with this setup guard (and, for an unprivileged driver, with
// --disable-userns) succeeded". The probe still decides everything itself
// as before (the path, the guard choosePIDGuard picks, whether
// --disable-userns applies) and only skips a trial whose exact outcome the
// cache confirms. So the cache can make the driver skip a trial, never pick
// another setup: a forged or stale record cannot make the driver use a
// weaker guard or leave out --disable-userns, and a failure is never
// cached (the next start tries again). Everything else the probe finds
// (Landlock ABI, seccomp, cgroups, /proc's entries, the init binary, the
// session network) is looked at afresh at every start: each is cheap.
//
// The key is a hash of everything the trials' outcome depends on that the
// driver can read (probeKeyMaterial): the driver binary's and bwrap's
// identity (path, device, inode, size, mtime, ctime, mode, owner: a
// reinstall, an upgrade, a setuid bit changes it), the configured bwrap
// path and fallback, the kernel release and version and the boot id (a
// reboot resets sysctls and LSM policy), the driver's uid, gid and groups,
// its capability sets, no_new_privs and seccomp status, its user, mount,
// PID and cgroup namespaces (another container is another key), the
// sysctls that gate namespaces (user.max_*_namespaces,
// kernel.unprivileged_userns_clone, kernel.apparmor_restrict_*), the active
// LSMs, AppArmor's policy revision (bumped at every profile load or
// removal) and the driver's own AppArmor label, SELinux's status page
// (its policy load counter), and the read set and /proc entries the trial
// binds. Any change of any of it is another key, and the record is not
// used. A driver that runs under a seccomp filter of its own (a container
// runtime's, a test's) neither reads nor writes the cache: two filters are
// not told apart by anything the driver can read, and a filter that
// refuses namespaces is exactly what the trial is there to notice.
//
// Trust: the record lives in the driver's state directory, private to its
// user (never inside a workspace), written 0600 through a rename. It is
// used only when the directory and the file are owned by the driver's euid
// and writable by nobody else, the file is a regular file (not a link) of
// bounded size, it parses, its checksum matches its content, and its
// fields have the forms they must have; anything else is ignored (and
// replaced by a fresh probe's record). What remains, a stale key nothing
// above caught (an LSM policy the driver cannot see, say), costs a refused
// command, not an unconfined one: a sandbox bwrap cannot build fails its
// setup and nothing runs. The first such failure removes the record
// (forgetProbeCache), so the next start probes afresh.

// probeCacheName is the record's file name in the state directory.
const probeCacheName = "probe-cache.json"

// probeCacheMax bounds the record read.
const probeCacheMax = 64 << 10

// probeRecord is the cache file's content.
type probeRecord struct {
	Version int    `json:"v"`
	Key     string `json:"key"`
	// Bwrap and BwrapVersion: the binary probed and what its --version
	// printed (after "bubblewrap ").
	Bwrap        string `json:"bwrap"`
	BwrapVersion string `json:"bwrap_version"`
	// Trials are the setups whose trial sandbox succeeded: "guard=MODE"
	// and "disable-userns guard=MODE".
	Trials []string `json:"trials"`
	// Sum is the sha256 of the record with Sum empty.
	Sum string `json:"sum"`
}

const probeRecordVersion = 1

// probeCache is one probe's use of the record.
type probeCache struct {
	path string
	key  string // "" when the cache is not to be used at all
	why  string // why it is not used (for the report), when key is ""
	rec  probeRecord
	// hit says the record matched the key; dirty says it gained a trial;
	// used says a trial was skipped on its word.
	hit, dirty, used bool
}

// bwrapVersionPattern is the form a cached bwrap version must have.
const bwrapVersionPattern = `^[0-9][0-9A-Za-z.+~-]{0,39}$`

// openProbeCache computes the key for this driver and reads the record.
func (d *Driver) openProbeCache(bwrapPath string) *probeCache {
	c := &probeCache{path: filepath.Join(d.cfg.StateDir, probeCacheName)}
	material, err := d.probeKeyMaterial(bwrapPath)
	if err != nil {
		c.why = err.Error()
		return c
	}
	sum := sha256.Sum256(material)
	c.key = hex.EncodeToString(sum[:])
	if rec, ok := readProbeRecord(c.path, d.cfg.StateDir); ok && rec.Key == c.key && rec.Bwrap == bwrapPath {
		c.rec, c.hit = rec, true
	} else {
		c.rec = probeRecord{Version: probeRecordVersion, Key: c.key, Bwrap: bwrapPath}
	}
	return c
}

// version is the cached --version of bwrap, if confirmed.
func (c *probeCache) version() (string, bool) {
	if c == nil || !c.hit || c.rec.BwrapVersion == "" {
		return "", false
	}
	return c.rec.BwrapVersion, true
}

// confirmed reports whether the trial named trial succeeded before.
func (c *probeCache) confirmed(trial string) bool {
	return c != nil && c.hit && slices.Contains(c.rec.Trials, trial)
}

// confirm records a successful trial (and, when version is set, bwrap's
// version).
func (c *probeCache) confirm(trial, version string) {
	if c == nil || c.key == "" {
		return
	}
	if version != "" && c.rec.BwrapVersion != version {
		c.rec.BwrapVersion, c.dirty = version, true
	}
	if !slices.Contains(c.rec.Trials, trial) {
		c.rec.Trials, c.dirty = append(c.rec.Trials, trial), true
	}
}

// save writes the record if it gained anything. Failures are not errors:
// the next start probes afresh.
func (c *probeCache) save(stateDir string) {
	if c == nil || c.key == "" || !c.dirty || c.rec.BwrapVersion == "" {
		return
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil || !privateOwnDir(stateDir) {
		return
	}
	rec := c.rec
	rec.Sum = ""
	body, err := json.Marshal(rec)
	if err != nil {
		return
	}
	s := sha256.Sum256(body)
	rec.Sum = hex.EncodeToString(s[:])
	out, err := json.Marshal(rec)
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(stateDir, ".probe-cache-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(out)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), c.path) != nil {
		_ = os.Remove(tmp.Name())
	}
}

// readProbeRecord reads and checks the record at path (see the trust
// paragraph above); ok is false for anything not to be trusted.
func readProbeRecord(path, stateDir string) (probeRecord, bool) {
	var rec probeRecord
	if !privateOwnDir(stateDir) {
		return rec, false
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return rec, false
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG ||
		int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 || st.Size > probeCacheMax {
		return rec, false
	}
	data, err := io.ReadAll(io.LimitReader(f, probeCacheMax+1))
	if err != nil || len(data) > probeCacheMax {
		return rec, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if dec.Decode(&rec) != nil || rec.Version != probeRecordVersion {
		return probeRecord{}, false
	}
	sum := rec.Sum
	rec.Sum = ""
	body, err := json.Marshal(rec)
	if err != nil {
		return probeRecord{}, false
	}
	s := sha256.Sum256(body)
	if sum != hex.EncodeToString(s[:]) || !regexp.MustCompile(bwrapVersionPattern).MatchString(rec.BwrapVersion) || !filepath.IsAbs(rec.Bwrap) {
		return probeRecord{}, false
	}
	for _, t := range rec.Trials {
		if !knownTrial(t) {
			return probeRecord{}, false
		}
	}
	rec.Sum = sum
	return rec, true
}

// Trial names.
func trialGuard(mode string) string  { return "guard=" + mode }
func trialUserns(mode string) string { return "disable-userns guard=" + mode }

// trialSessionUser names probeSessionUser's trial with the init binary's
// identity (the trial runs its code).
func trialSessionUser(mode, initID string) string {
	return "session-user guard=" + mode + " init=" + initID
}

// trialSessionOverlay names probeSessionOverlay's trial, likewise, with
// the file system it mounted the overlay's upper on (fs nil: the prefix
// every such name has).
func trialSessionOverlay(mode, initID string, fs *fsIdentity) string {
	name := "session-overlay guard=" + mode + " init=" + initID
	if fs != nil {
		name += fmt.Sprintf(" fs=%d:%x:%x:%x", fs.dev, fs.typ, uint32(fs.fsid0), uint32(fs.fsid1))
	}
	return name
}

func knownTrial(t string) bool {
	for _, m := range []string{guardPID, guardUserPID, guardNone} {
		if t == trialGuard(m) || t == trialUserns(m) || strings.HasPrefix(t, trialSessionUser(m, "")) ||
			strings.HasPrefix(t, trialSessionOverlay(m, "", nil)) {
			return true
		}
	}
	return false
}

// privateOwnDir reports whether dir is a directory (not a link) owned by
// this euid that nobody else can write to.
func privateOwnDir(dir string) bool {
	var st unix.Stat_t
	return unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR &&
		int(st.Uid) == os.Geteuid() && st.Mode&0o022 == 0
}

// probeKeyFiles are the host files whose content the key includes (see
// above); a missing or unreadable one counts as its absence.
func probeKeyFiles() []string {
	return []string{
		"/proc/sys/kernel/random/boot_id",
		"/proc/sys/kernel/unprivileged_userns_clone",
		"/proc/sys/user/max_user_namespaces",
		"/proc/sys/user/max_pid_namespaces",
		"/proc/sys/user/max_mnt_namespaces",
		"/proc/sys/user/max_net_namespaces",
		"/proc/sys/user/max_uts_namespaces",
		"/proc/sys/user/max_ipc_namespaces",
		"/proc/sys/user/max_cgroup_namespaces",
		"/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
		"/proc/sys/kernel/apparmor_restrict_unprivileged_unconfined",
		"/proc/sys/kernel/apparmor_restrict_unprivileged_userns_complain",
		"/proc/sys/kernel/apparmor_restrict_unprivileged_userns_force",
		"/sys/kernel/security/lsm",
		"/sys/kernel/security/apparmor/revision",
		"/sys/module/apparmor/parameters/enabled",
		"/proc/self/attr/current",
		"/proc/self/attr/apparmor/current",
		"/sys/fs/selinux/enforce",
		"/sys/fs/selinux/status",
	}
}

// probeStatusFields are the lines of /proc/self/status in the key.
func probeStatusFields() []string {
	return []string{"Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:",
		"NoNewPrivs:", "Seccomp:", "Seccomp_filters:"}
}

// probeKeyMaterial is what the key hashes; an error says why the cache is
// not to be used here at all.
func (d *Driver) probeKeyMaterial(bwrapPath string) ([]byte, error) {
	// This thread's status, not the main thread's (/proc/self): a
	// Landlock-tier command's notifier drops the effective capabilities
	// of the thread it runs on, which ends with it, except the main
	// thread, which Go keeps (idle) with the drop: read there, the key
	// would change and the probe run again for nothing.
	runtime.LockOSThread()
	status, err := os.ReadFile("/proc/thread-self/status")
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("probe cache off: %w", err)
	}
	if !unfilteredProcess(string(status)) {
		return nil, errors.New("probe cache off: the driver runs under a seccomp filter")
	}
	var b bytes.Buffer
	put := func(k, v string) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(v)
		b.WriteByte(0)
	}
	put("format", strconv.Itoa(probeRecordVersion))
	for _, f := range []struct{ name, path string }{{"driver", d.cfg.DriverBinary}, {"bwrap", bwrapPath}} {
		id, err := fileIdentity(f.path)
		if err != nil {
			return nil, fmt.Errorf("probe cache off: %s: %w", f.name, err)
		}
		put(f.name, f.path+" "+id)
	}
	put("bwrap_path_option", d.cfg.Options.BwrapPath)
	put("fallback_option", string(d.cfg.Options.Fallback))
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return nil, fmt.Errorf("probe cache off: uname: %w", err)
	}
	put("kernel", unix.ByteSliceToString(uts.Release[:])+" "+unix.ByteSliceToString(uts.Version[:])+" "+unix.ByteSliceToString(uts.Machine[:]))
	put("ids", fmt.Sprintf("%d %d %d %d", os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid()))
	for _, line := range strings.Split(string(status), "\n") {
		for _, f := range probeStatusFields() {
			if strings.HasPrefix(line, f) {
				put("status", strings.Join(strings.Fields(line), " "))
			}
		}
	}
	for _, ns := range []string{"user", "mnt", "pid", "cgroup"} {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return nil, fmt.Errorf("probe cache off: namespace %s: %w", ns, err)
		}
		put("ns", l)
	}
	for _, p := range append(probeKeyFiles(), d.cfg.probeKeyExtra...) {
		data, err := readSmall(p)
		if err != nil {
			put(p, "absent")
			continue
		}
		put(p, string(data))
	}
	put("proc_cover", strings.Join(procCoverArgs(), " "))
	for _, m := range systemReadSet() {
		put("read_set", m.Kind+" "+m.Src+" "+m.Dest)
	}
	return b.Bytes(), nil
}

// unfilteredProcess reports whether /proc/self/status text shows no
// seccomp filter on this process.
func unfilteredProcess(status string) bool {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			return strings.TrimSpace(v) == "0"
		}
	}
	// A kernel that does not say: assume a filter.
	return false
}

// fileIdentity names what is at path now: a replaced, rewritten, touched
// or re-permissioned file gives another identity.
func fileIdentity(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("dev=%d ino=%d size=%d mtime=%d.%d ctime=%d.%d mode=%o uid=%d gid=%d",
		st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, st.Mode, st.Uid, st.Gid), nil
}

// readSmall reads at most 4 KiB of path.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4096))
}

// forgetProbeCache removes the record after a sandbox failed its setup:
// whatever the cause, the next driver start then runs its trials afresh
// instead of trusting a confirmation the host may no longer honour.
func (d *Driver) forgetProbeCache(err error) {
	var se *setupError
	if err == nil || !errors.As(err, &se) {
		return
	}
	if h := d.probe(); h == nil || !h.probeCached {
		return
	}
	if rmErr := os.Remove(filepath.Join(d.cfg.StateDir, probeCacheName)); rmErr == nil {
		d.log.Warn("a sandbox failed its setup on a cached host probe; the cache is removed", "error", err)
	}
}
