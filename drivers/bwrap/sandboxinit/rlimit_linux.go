//go:build linux

package sandboxinit

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// rlimitSetting is one limit sandbox-init lowers before exec.
type rlimitSetting struct {
	Name     string
	Resource int
	Value    uint64
}

// rlimitPlan lists the limits spec asks for. RLIMIT_CORE is always 0: a core
// dump would write the sandbox's memory (secrets the command was handed, the
// proxy placeholders) to a file, and the workspace is writable.
func rlimitPlan(spec *InitSpec) []rlimitSetting {
	plan := []rlimitSetting{{"RLIMIT_CORE", syscall.RLIMIT_CORE, 0}}
	if spec.RlimitASBytes > 0 {
		// The floor under the memory limit when no cgroup can enforce
		// memory.max: virtual, so generous runtimes need headroom.
		plan = append(plan, rlimitSetting{"RLIMIT_AS", syscall.RLIMIT_AS, spec.RlimitASBytes})
	}
	if spec.RlimitNproc > 0 {
		// Counted per real uid across the host and ignored for root
		// (INIT_USER) or CAP_SYS_RESOURCE: a backstop, not the pid limit.
		plan = append(plan, rlimitSetting{"RLIMIT_NPROC", unix.RLIMIT_NPROC, spec.RlimitNproc})
	}
	if spec.RlimitNofile > 0 {
		plan = append(plan, rlimitSetting{"RLIMIT_NOFILE", syscall.RLIMIT_NOFILE, spec.RlimitNofile})
	}
	return plan
}

// applyRlimits sets soft and hard limit of each setting to min(asked,
// current hard limit): limits only go down, so an unprivileged launch never
// fails for asking more than it has, and the hard limit stops the child from
// raising them again. syscall.Setrlimit (not x/sys) is used so the Go
// runtime forgets the RLIMIT_NOFILE it would otherwise restore at exec.
func applyRlimits(plan []rlimitSetting) error {
	for _, s := range plan {
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(s.Resource, &cur); err != nil {
			return fmt.Errorf("getrlimit(%s): %w", s.Name, err)
		}
		v := min(s.Value, cur.Max)
		if err := syscall.Setrlimit(s.Resource, &syscall.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setrlimit(%s, %d): %w", s.Name, v, err)
		}
	}
	return nil
}
