// Package bwrap is the Linux sandbox driver of aleph-sandbox.
//
// A command runs as
//
//	bwrap <namespaces, mounts> -- <driver binary> sandbox-init <initSpec> -- PROGRAM ARGS...
//
// bubblewrap gives it fresh mount, PID, IPC, UTS, cgroup and (unless the
// network is allowed) network namespaces, a root built only from the system
// read set, the workspace and the granted paths, and drops every capability.
// Inside, the hidden sandbox-init mode of the same binary adds Landlock,
// rlimits and a seccomp filter before exec'ing the target. Around it the
// driver puts the process tree into a per-command cgroup (v2 where
// delegated, else v1 where writable) for memory, pid and CPU limits, streams
// output within its budget, and kills the whole tree on timeout, cancel or
// its own death.
//
// The launch plan (launchPlan) is the driver's Profile: ProfileFor builds it from
// the request; Run checks it again before using it, because a profile's
// digest proves integrity, not origin.
package bwrap
