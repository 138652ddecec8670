package gitimport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// GitError is the host's git failing.
type GitError struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *GitError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if len(msg) > 2000 {
		msg = msg[:2000] + "..."
	}
	return fmt.Sprintf("host git %s: %v: %s", strings.Join(e.Args, " "), e.Err, msg)
}

func (e *GitError) Unwrap() error { return e.Err }

// exitCode is the git's exit status, or -1.
func (e *GitError) exitCode() int {
	var ee *exec.ExitError
	if errors.As(e.Err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// hostGit runs the host's git in the host's repository only.
//
// The environment is built from nothing: whatever GIT_DIR, GIT_WORK_TREE,
// GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY, GIT_CONFIG_* ... the process that
// calls us was started with would redirect git to another repository or
// inject config, so none of it is passed on. GIT_DIR is always set to the
// host's .git (no discovery: git never walks up from a directory, nor
// looks at anything the session wrote), and the working directory is that
// same host .git. The host repository's own config, hooks and the user's
// global config are the user's, trusted: they apply as to any git the
// user runs there.
type hostGit struct {
	bin    string
	gitDir string
	env    []string
	// as is the workspace's owner to run as (root only; owner_unix.go).
	as *runAs
}

// newHostGit runs bin in gitDir, as ws's owner where this process is root.
func newHostGit(bin, gitDir, ws string) *hostGit {
	env := []string{"LC_ALL=C", "GIT_TERMINAL_PROMPT=0", "GIT_DIR=" + gitDir}
	for _, k := range []string{"PATH", "HOME", "XDG_CONFIG_HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return &hostGit{bin: bin, gitDir: gitDir, env: env, as: workspaceOwner(ws)}
}

func (h *hostGit) command(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, h.bin, args...)
	c.Env = h.env
	c.Dir = h.gitDir
	h.as.apply(c)
	c.WaitDelay = 5 * time.Second
	return c
}

// run runs git with args and stdin, returning its stdout.
func (h *hostGit) run(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	c := h.command(ctx, args...)
	var out, errb bytes.Buffer
	c.Stdin, c.Stdout, c.Stderr = stdin, &out, &errb
	if err := c.Run(); err != nil {
		return out.Bytes(), &GitError{Args: args, Stderr: errb.String(), Err: err}
	}
	return out.Bytes(), nil
}

// test runs git for a yes/no answer given by exit status 0/1.
func (h *hostGit) test(ctx context.Context, args ...string) (bool, error) {
	_, err := h.run(ctx, nil, args...)
	if err == nil {
		return true, nil
	}
	var ge *GitError
	if errors.As(err, &ge) && ge.exitCode() == 1 {
		return false, nil
	}
	return false, err
}

// catFile asks the host repository whether it has objects, one long-lived
// `git cat-file --batch-check`.
type catFile struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	errb bytes.Buffer
}

func (h *hostGit) catFile(ctx context.Context) (*catFile, error) {
	c := h.command(ctx, "cat-file", "--batch-check")
	cf := &catFile{cmd: c}
	c.Stderr = &cf.errb
	in, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, &GitError{Args: c.Args[1:], Err: err}
	}
	cf.in, cf.out = in, bufio.NewReader(out)
	return cf, nil
}

// hasMany answers for each of ids whether the host has it. The ids are
// written while the answers are read, so that neither side waits on a
// full pipe.
func (cf *catFile) hasMany(ids []oid) ([]bool, error) {
	werr := make(chan error, 1)
	go func() {
		w := bufio.NewWriter(cf.in)
		for _, id := range ids {
			if _, err := fmt.Fprintf(w, "%s\n", id); err != nil {
				werr <- err
				return
			}
		}
		werr <- w.Flush()
	}()
	out := make([]bool, len(ids))
	var rerr error
	for i := range ids {
		line, err := cf.out.ReadString('\n')
		if err != nil {
			rerr = err
			break
		}
		out[i] = !strings.HasSuffix(line, " missing\n")
	}
	if rerr != nil {
		// The writer may be blocked on a git that died: closing its
		// stdin ends it.
		_ = cf.in.Close()
	}
	if err := <-werr; err != nil && rerr == nil {
		rerr = err
	}
	if rerr != nil {
		return nil, &GitError{Args: cf.cmd.Args[1:], Err: rerr}
	}
	return out, nil
}

func (cf *catFile) close() {
	_ = cf.in.Close()
	_ = cf.cmd.Wait()
}
