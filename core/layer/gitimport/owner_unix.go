//go:build unix

package gitimport

import (
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// runAs is who the host's git runs as: the workspace's owner, when this
// process is root and the workspace is another user's. Run as root in a
// repository another user owns, git refuses it ("dubious ownership"), and
// any object or ref it wrote would be root's, which the user's own git
// could then not replace. Only root can switch; anyone else's git runs as
// itself, over a workspace it may write.
type runAs struct {
	uid, gid uint32
	home     string
}

// workspaceOwner is the owner of ws to run git as, or nil.
func workspaceOwner(ws string) *runAs {
	if os.Geteuid() != 0 || ws == "" {
		return nil
	}
	fi, err := os.Stat(ws)
	if err != nil {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nil
	}
	r := &runAs{uid: st.Uid, gid: st.Gid}
	if u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10)); err == nil {
		r.home = u.HomeDir
		if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			r.gid = uint32(g)
		}
	}
	return r
}

// apply makes c run as r, with r's HOME (root's config is not the
// user's, and unreadable to the user) and no XDG_CONFIG_HOME of root's.
func (r *runAs) apply(c *exec.Cmd) {
	if r == nil {
		return
	}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: r.uid, Gid: r.gid, NoSetGroups: true}}
	env := make([]string, 0, len(c.Env))
	for _, e := range c.Env {
		if !strings.HasPrefix(e, "HOME=") && !strings.HasPrefix(e, "XDG_CONFIG_HOME=") {
			env = append(env, e)
		}
	}
	home := r.home
	if home == "" {
		home = "/nonexistent"
	}
	c.Env = append(env, "HOME="+home)
}
