package appcontainer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// fakeVolume is a file system shared by several driver processes, with
// the semantics placeholder_windows.go relies on: a directory is removed
// only when it is the one named, empty, and nobody holds it (a held
// directory answers a DELETE open with a sharing violation), and the
// handles of a process that dies are closed by the OS.
type fakeVolume struct {
	mu      sync.Mutex
	next    int
	dirs    map[string]*fakeDir // by lower-case path
	dead    map[string]bool     // owner tags of ended processes
	busy    map[string]int      // path: how many more Create/Hold calls see a removal in progress
	creates int
	failAt  string // Create of this path fails after making the directory
}

type fakeDir struct {
	path  string
	id    FileID
	fresh bool // its DACL is the one Create gives
	full  bool // not empty
	holds map[*fakeHold]bool
}

type fakeHold struct {
	v     *fakeVolume
	d     *fakeDir
	owner string
}

func (h *fakeHold) ID() FileID { return h.d.id }

func (h *fakeHold) Close() error {
	h.v.mu.Lock()
	defer h.v.mu.Unlock()
	delete(h.d.holds, h)
	return nil
}

func newVolume() *fakeVolume {
	return &fakeVolume{dirs: map[string]*fakeDir{}, dead: map[string]bool{}, busy: map[string]int{}}
}

// fakeProc is one driver process's view of the volume.
type fakeProc struct {
	v     *fakeVolume
	owner string
}

func (v *fakeVolume) proc(owner string) *fakeProc { return &fakeProc{v: v, owner: owner} }

// userDir is an entry of the user's at path (not made by a driver).
func (v *fakeVolume) userDir(path string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.next++
	v.dirs[strings.ToLower(path)] = &fakeDir{path: path, id: FileID(fmt.Sprintf("u-%d", v.next)), holds: map[*fakeHold]bool{}}
}

// kill ends the process owner: the OS closes its handles.
func (v *fakeVolume) kill(owner string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.dead[owner] = true
	for _, d := range v.dirs {
		for h := range d.holds {
			if h.owner == owner {
				delete(d.holds, h)
			}
		}
	}
}

func (v *fakeVolume) exists(path string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.dirs[strings.ToLower(path)] != nil
}

func (v *fakeVolume) holders(path string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if d := v.dirs[strings.ToLower(path)]; d != nil {
		return len(d.holds)
	}
	return 0
}

func (v *fakeVolume) paths() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, d := range v.dirs {
		out = append(out, d.path)
	}
	sort.Strings(out)
	return out
}

func (p *fakeProc) hold(d *fakeDir) *fakeHold {
	h := &fakeHold{v: p.v, d: d, owner: p.owner}
	d.holds[h] = true
	return h
}

func (p *fakeProc) Create(path string) (PlaceholderHold, error) {
	v := p.v
	v.mu.Lock()
	defer v.mu.Unlock()
	k := strings.ToLower(path)
	if v.busy[k] > 0 {
		v.busy[k]--
		return nil, ErrPlaceholderBusy
	}
	if v.dirs[k] != nil {
		return nil, fs.ErrExist
	}
	v.next++
	v.creates++
	d := &fakeDir{path: path, id: FileID(fmt.Sprintf("f-%d", v.next)), fresh: true, holds: map[*fakeHold]bool{}}
	v.dirs[k] = d
	if strings.EqualFold(v.failAt, path) {
		return nil, errors.New("the hold could not be taken")
	}
	return p.hold(d), nil
}

func (p *fakeProc) Hold(path string) (PlaceholderHold, error) {
	v := p.v
	v.mu.Lock()
	defer v.mu.Unlock()
	k := strings.ToLower(path)
	if v.busy[k] > 0 {
		v.busy[k]--
		return nil, ErrPlaceholderBusy
	}
	d := v.dirs[k]
	if d == nil {
		return nil, fs.ErrNotExist
	}
	return p.hold(d), nil
}

func (p *fakeProc) Identify(path string) (FileID, error) {
	v := p.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if d := v.dirs[strings.ToLower(path)]; d != nil {
		return d.id, nil
	}
	return "", fs.ErrNotExist
}

func (p *fakeProc) Remove(path string, id FileID, fresh bool) error {
	v := p.v
	v.mu.Lock()
	defer v.mu.Unlock()
	k := strings.ToLower(path)
	d := v.dirs[k]
	switch {
	case d == nil:
		return fs.ErrNotExist
	case d.id != id || d.full || fresh && !d.fresh:
		return ErrPlaceholderChanged
	case len(d.holds) > 0:
		return ErrPlaceholderBusy
	}
	delete(v.dirs, k)
	return nil
}

func (p *fakeProc) Owner() string { return p.owner }

func (p *fakeProc) OwnerGone(owner string) bool {
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	return p.v.dead[owner]
}

// records lists the state directory's record files.
func records(t *testing.T, stateDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(stateDir, "placeholders"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestPlaceholdersMadeForTheRunAndRemovedAfter(t *testing.T) {
	v, state := newVolume(), t.TempDir()
	m := newPlaceholders(v.proc("10-1"), state)
	v.userDir(`C:\ws\.git`)
	release, err := m.acquire([]string{`C:\ws\.git`, `C:\ws\.codex`, `C:\ws\.envrc`})
	if err != nil {
		t.Fatal(err)
	}
	// While the command runs: the missing ones exist, held, recorded by
	// file ID with their path; no intent is left; the user's .git is
	// neither held nor recorded.
	if !v.exists(`C:\ws\.codex`) || !v.exists(`C:\ws\.envrc`) || v.holders(`C:\ws\.codex`) != 1 {
		t.Fatalf("placeholders not made and held: %q", v.paths())
	}
	if v.holders(`C:\ws\.git`) != 0 {
		t.Error("the user's own .git is held as a placeholder")
	}
	recs := records(t, state)
	if len(recs) != 2 || !strings.HasPrefix(recs[0], "ph-") || !strings.HasPrefix(recs[1], "ph-") {
		t.Fatalf("records %q, want two ph- records", recs)
	}
	id, _ := v.proc("x").Identify(`C:\ws\.codex`)
	if b, err := os.ReadFile(filepath.Join(state, "placeholders", "ph-"+string(id))); err != nil || string(b) != `C:\ws\.codex` {
		t.Errorf("record of .codex: %q %v", b, err)
	}
	release()
	if got := v.paths(); strings.Join(got, "|") != `C:\ws\.git` {
		t.Errorf("after the command the volume holds %q, want only the user's .git", got)
	}
	if recs := records(t, state); len(recs) != 0 {
		t.Errorf("records left: %q", recs)
	}
	release() // a second call changes nothing
	if !v.exists(`C:\ws\.git`) {
		t.Error("the user's .git was removed")
	}
}

func TestPlaceholderSharedByCommandsOfOneProcess(t *testing.T) {
	v, state := newVolume(), t.TempDir()
	m := newPlaceholders(v.proc("10-1"), state)
	r1, err := m.acquire([]string{`C:\ws\.codex`})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m.acquire([]string{`C:\ws\.codex`, `C:\ws\.idea`})
	if err != nil {
		t.Fatal(err)
	}
	if v.creates != 2 || v.holders(`C:\ws\.codex`) != 1 {
		t.Errorf("creates %d, holders %d: the second command must share the first one's placeholder", v.creates, v.holders(`C:\ws\.codex`))
	}
	r1()
	// The second command still depends on it.
	if !v.exists(`C:\ws\.codex`) || v.holders(`C:\ws\.codex`) != 1 {
		t.Fatal("the first command's end removed or released a placeholder the second still uses")
	}
	r2()
	if got := v.paths(); len(got) != 0 {
		t.Errorf("left after the last user: %q", got)
	}
	if recs := records(t, state); len(recs) != 0 {
		t.Errorf("records left: %q", recs)
	}
}

func TestPlaceholderSharedAcrossDriverProcesses(t *testing.T) {
	v, state := newVolume(), t.TempDir()
	a := newPlaceholders(v.proc("10-1"), state)
	b := newPlaceholders(v.proc("20-1"), state)
	ra, err := a.acquire([]string{`C:\ws\.codex`})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.acquire([]string{`C:\ws\.codex`})
	if err != nil {
		t.Fatal(err)
	}
	if v.creates != 1 || v.holders(`C:\ws\.codex`) != 2 {
		t.Fatalf("creates %d holders %d: the second process must hold the first one's placeholder", v.creates, v.holders(`C:\ws\.codex`))
	}
	ra()
	if !v.exists(`C:\ws\.codex`) {
		t.Fatal("removed while another driver process's command holds it")
	}
	if len(records(t, state)) != 1 {
		t.Error("its record went with the first process's command")
	}
	rb()
	if v.exists(`C:\ws\.codex`) || len(records(t, state)) != 0 {
		t.Errorf("the last user left %q, records %q", v.paths(), records(t, state))
	}
}

// An entry nobody recorded is the user's: never held, never removed, by a
// command's end or by a sweep, even an empty directory or one an intent
// of a dead process names.
func TestPlaceholderNeverTakesAUsersEntry(t *testing.T) {
	v, state := newVolume(), t.TempDir()
	v.userDir(`C:\ws\.vscode`)
	dir := filepath.Join(state, "placeholders")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "intent-99-1-1"), []byte(`C:\ws\.vscode`), 0o600); err != nil {
		t.Fatal(err)
	}
	v.kill("99-1")
	m := newPlaceholders(v.proc("10-1"), state)
	release, err := m.acquire([]string{`C:\ws\.vscode`})
	if err != nil {
		t.Fatal(err)
	}
	if v.holders(`C:\ws\.vscode`) != 0 || v.creates != 0 {
		t.Error("the user's entry was taken for a placeholder")
	}
	release()
	if !v.exists(`C:\ws\.vscode`) {
		t.Fatal("the user's entry was removed")
	}
	if recs := records(t, state); len(recs) != 0 {
		t.Errorf("the dead process's intent was not dropped: %q", recs)
	}
}

// A driver killed mid-command leaves its placeholders and records; the
// next driver's first command removes those nobody holds, and keeps those
// a live process's command still holds.
func TestPlaceholderSweptAfterAKilledDriver(t *testing.T) {
	v, state := newVolume(), t.TempDir()
	killed := newPlaceholders(v.proc("10-1"), state)
	if _, err := killed.acquire([]string{`C:\ws\.codex`, `C:\ws\.idea`}); err != nil {
		t.Fatal(err)
	}
	live := newPlaceholders(v.proc("20-1"), state)
	rl, err := live.acquire([]string{`C:\ws\.idea`})
	if err != nil {
		t.Fatal(err)
	}
	v.kill("10-1")
	next := newPlaceholders(v.proc("30-1"), state)
	rn, err := next.acquire(nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.exists(`C:\ws\.codex`) {
		t.Error("the killed driver's placeholder nobody holds was not swept")
	}
	if !v.exists(`C:\ws\.idea`) || len(records(t, state)) != 1 {
		t.Fatalf("the sweep removed a placeholder a live command holds (left %q, records %q)", v.paths(), records(t, state))
	}
	rn()
	rl()
	if len(v.paths()) != 0 || len(records(t, state)) != 0 {
		t.Errorf("left %q, records %q", v.paths(), records(t, state))
	}
}

// A driver killed between the intent and the record (or whose recording
// failed) leaves an unrecorded directory: swept only if it is still
// exactly as created and its creator is gone.
func TestPlaceholderIntentsSwept(t *testing.T) {
	v, state := newVolume(), t.TempDir()
	v.failAt = `C:\ws\.cursor`
	crashed := newPlaceholders(v.proc("10-1"), state)
	if _, err := crashed.acquire([]string{`C:\ws\.cursor`}); err == nil || !strings.Contains(err.Error(), "hold could not be taken") {
		t.Fatalf("acquire: %v, want the Create failure", err)
	}
	if !v.exists(`C:\ws\.cursor`) || len(records(t, state)) != 1 || !strings.HasPrefix(records(t, state)[0], "intent-10-1-") {
		t.Fatalf("set-up: want a directory and its intent left, have %q %q", v.paths(), records(t, state))
	}
	// Its creator still runs: a sweep of another process leaves it.
	other := newPlaceholders(v.proc("20-1"), state)
	if _, err := other.acquire(nil); err != nil {
		t.Fatal(err)
	}
	if !v.exists(`C:\ws\.cursor`) || len(records(t, state)) != 1 {
		t.Fatal("swept the intent of a live process")
	}
	v.kill("10-1")
	next := newPlaceholders(v.proc("30-1"), state)
	if _, err := next.acquire(nil); err != nil {
		t.Fatal(err)
	}
	if v.exists(`C:\ws\.cursor`) || len(records(t, state)) != 0 {
		t.Errorf("the dead creator's fresh directory or intent was left: %q %q", v.paths(), records(t, state))
	}

	// The same, but the directory changed (its DACL is not the one made):
	// it is the user's now and stays; the intent goes.
	v.failAt = `C:\ws\.claude`
	c2 := newPlaceholders(v.proc("40-1"), state)
	if _, err := c2.acquire([]string{`C:\ws\.claude`}); err == nil {
		t.Fatal("want the Create failure")
	}
	v.mu.Lock()
	v.dirs[strings.ToLower(`C:\ws\.claude`)].fresh = false
	v.mu.Unlock()
	v.kill("40-1")
	if _, err := newPlaceholders(v.proc("50-1"), state).acquire(nil); err != nil {
		t.Fatal(err)
	}
	if !v.exists(`C:\ws\.claude`) || len(records(t, state)) != 0 {
		t.Errorf("changed directory removed, or intent kept: %q %q", v.paths(), records(t, state))
	}
}

// Another driver process removing a placeholder while this one looks at
// it: the busy answer is retried, and the name is made again.
func TestPlaceholderRetriesARemovalInProgress(t *testing.T) {
	v, state := newVolume(), t.TempDir()
	v.busy[strings.ToLower(`C:\ws\.codex`)] = 2
	m := newPlaceholders(v.proc("10-1"), state)
	release, err := m.acquire([]string{`C:\ws\.codex`})
	if err != nil {
		t.Fatal(err)
	}
	if !v.exists(`C:\ws\.codex`) || v.holders(`C:\ws\.codex`) != 1 {
		t.Error("not made after the retries")
	}
	release()
	// One that never settles fails the command, naming the path.
	v.busy[strings.ToLower(`C:\ws\.codex`)] = placeholderAttempts + 5
	if _, err := m.acquire([]string{`C:\ws\.codex`}); err == nil || !strings.Contains(err.Error(), `C:\ws\.codex keeps changing`) {
		t.Errorf("got %v, want a refusal naming the path", err)
	}
}

// The journal cannot be written: nothing is created, the command fails,
// and what the command took before is released.
func TestPlaceholderJournalFailureCreatesNothing(t *testing.T) {
	v := newVolume()
	state := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(state, nil, 0o600); err != nil { // a file where the directory should be
		t.Fatal(err)
	}
	v.userDir(`C:\ws\.git`)
	m := newPlaceholders(v.proc("10-1"), state)
	if _, err := m.acquire([]string{`C:\ws\.git`, `C:\ws\.codex`}); err == nil || !strings.Contains(err.Error(), "placeholder records") {
		t.Fatalf("got %v, want the records error", err)
	}
	if v.creates != 0 || v.exists(`C:\ws\.codex`) {
		t.Error("a placeholder was made without a journal")
	}
}

// The driver: while Launch runs, every missing protected entry of the
// workspace exists and is held; after Run, on every way it ends, none is
// left and no record either.
func TestRunRemovesPlaceholdersOnEveryPath(t *testing.T) {
	cases := map[string]func(pf *fakePlatform) context.Context{
		"exit": func(*fakePlatform) context.Context { return t.Context() },
		"setup failure": func(pf *fakePlatform) context.Context {
			pf.launchFail = map[Tier]error{TierAppContainer: errors.New("ACL")}
			return t.Context()
		},
		"run error": func(pf *fakePlatform) context.Context { pf.runErr = errors.New("wait failed"); return t.Context() },
		"cancel": func(pf *fakePlatform) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			pf.runErr = context.Canceled
			pf.onLaunch = append(pf.onLaunch, cancel)
			return ctx
		},
	}
	for name, set := range cases {
		t.Run(name, func(t *testing.T) {
			v := newVolume()
			pf := &fakePlatform{}
			d := newTestDriverOn(t, pf, "", v)
			var during []string
			pf.onLaunch = append(pf.onLaunch, func() {
				for _, e := range driverapi.DefaultProtectedEntries() {
					if p := wsPath + `\` + e; v.holders(p) != 1 {
						during = append(during, p)
					}
				}
			})
			ctx := set(pf)
			spec := runSpec(t, d, driverapi.Capabilities{})
			_, err := d.Run(ctx, spec, driverapi.Streams{})
			if (name == "exit") != (err == nil) {
				t.Errorf("Run: %v", err)
			}
			if len(during) != 0 {
				t.Errorf("not held while the command ran: %q", during)
			}
			if got := v.paths(); len(got) != 0 {
				t.Errorf("left on the host after the command: %q", got)
			}
			if recs := records(t, d.cfg.StateDir); len(recs) != 0 {
				t.Errorf("records left: %q", recs)
			}
		})
	}
}

// The job tier confines no file and makes nothing; and a command the
// host's tier refuses makes nothing either.
func TestRunMakesNoPlaceholderWhenNothingRuns(t *testing.T) {
	v := newVolume()
	pf := &fakePlatform{probeFail: map[Tier]error{TierAppContainer: errors.New("absent"), TierRestrictedToken: errors.New("absent")}}
	d := newTestDriverOn(t, pf, "job_object", v)
	if _, err := d.Run(t.Context(), runSpec(t, d, allowAll), driverapi.Streams{}); err == nil {
		t.Fatal("the job tier ran a command")
	}
	if v.creates != 0 {
		t.Errorf("placeholders made for a refused command: %d", v.creates)
	}
}

// Two commands of one driver in one workspace, overlapping: the first to
// end leaves the placeholders the second still runs with.
func TestRunConcurrentCommandsShareAPlaceholder(t *testing.T) {
	v := newVolume()
	pf := &fakePlatform{}
	d := newTestDriverOn(t, pf, "", v)
	spec := runSpec(t, d, driverapi.Capabilities{})
	started, finish := make(chan struct{}), make(chan struct{})
	pf.block = func(l Launch) {
		if l.CommandID == "long" {
			close(started)
			<-finish
		}
	}
	long := spec
	long.CommandID = "long"
	done := make(chan error, 1)
	go func() { _, err := d.Run(t.Context(), long, driverapi.Streams{}); done <- err }()
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the long command did not start")
	}
	if _, err := d.Run(t.Context(), spec, driverapi.Streams{}); err != nil {
		t.Fatal(err)
	}
	if !v.exists(wsPath+`\.codex`) || v.holders(wsPath+`\.codex`) != 1 {
		t.Errorf("the short command's end removed the long one's placeholder: %q", v.paths())
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := v.paths(); len(got) != 0 {
		t.Errorf("left after both: %q", got)
	}
}

// A janitor is started once per driver process, with its first
// placeholder, and not by a command that needs none.
func TestPlaceholderJanitorStartedWithTheFirstPlaceholder(t *testing.T) {
	v, state := newVolume(), t.TempDir()
	j := &janitorProc{fakeProc: v.proc("10-1")}
	v.userDir(`C:\ws\.git`)
	m := newPlaceholders(j, state)
	r, err := m.acquire([]string{`C:\ws\.git`})
	if err != nil {
		t.Fatal(err)
	}
	r()
	if j.started != 0 {
		t.Fatal("a janitor was started though nothing needed a placeholder")
	}
	for i := 0; i < 2; i++ {
		r, err := m.acquire([]string{`C:\ws\.codex`, `C:\ws\.idea`})
		if err != nil {
			t.Fatal(err)
		}
		r()
	}
	if j.started != 1 || j.stateDir != state {
		t.Errorf("janitor started %d times with %q, want once with %q", j.started, j.stateDir, state)
	}
	if j.createsAtStart != 0 {
		t.Errorf("the janitor was started after %d placeholders were made, want before the first", j.createsAtStart)
	}
}

type janitorProc struct {
	*fakeProc
	started        int
	stateDir       string
	createsAtStart int
}

func (j *janitorProc) StartJanitor(stateDir string) error {
	j.started++
	j.stateDir = stateDir
	j.createsAtStart = j.v.creates
	return nil
}

// The janitor's sweep: the dead driver's placeholders go, a live one's
// stay.
func TestJanitorSweep(t *testing.T) {
	v, state := newVolume(), t.TempDir()
	if _, err := newPlaceholders(v.proc("10-1"), state).acquire([]string{`C:\ws\.codex`}); err != nil {
		t.Fatal(err)
	}
	rl, err := newPlaceholders(v.proc("20-1"), state).acquire([]string{`C:\other\.codex`})
	if err != nil {
		t.Fatal(err)
	}
	v.kill("10-1")
	janitorSweep(v.proc("30-1"), state)
	if got := v.paths(); strings.Join(got, "|") != `C:\other\.codex` {
		t.Errorf("after the janitor: %q, want only the live driver's placeholder", got)
	}
	rl()
}

func TestParseJanitorArgs(t *testing.T) {
	if st, owner, err := parseJanitorArgs([]string{"--state", `C:\Users\u\AppData\Local\aleph-sandbox\driver`, "--owner", "123-456"}); err != nil || owner != "123-456" || !strings.HasSuffix(st, `driver`) {
		t.Errorf("good args: %q %q %v", st, owner, err)
	}
	for _, bad := range [][]string{
		nil, {"--state", `C:\s`}, {"--state", "relative", "--owner", "1-2"}, {"--state", `C:\s`, "--owner", "1"},
		{"--state", `C:\s`, "--owner", "x-2"}, {"--owner", "1-2", "--state", `C:\s`}, {"--state", `C:\s`, "--owner", "1-2", "extra"},
	} {
		if _, _, err := parseJanitorArgs(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
