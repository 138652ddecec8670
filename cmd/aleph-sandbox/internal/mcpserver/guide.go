package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// What the server tells a model before its first call: the tools'
// descriptions and annotations and the server's instructions, written
// from the server's real configuration (its default timeout, output
// limit, baseline and workspace), so that a model plans with the limits
// it will meet instead of discovering them by failing.

// limitsText says the default timeout and the output limit, as the
// configuration sets them; unknown (mcp --host: the service's
// configuration applies) it says so.
func limitsText(cfg Config) string {
	timeout := "the configured default"
	if cfg.DefaultTimeout > 0 {
		timeout = fmt.Sprintf("%s, the configured default", seconds(cfg.DefaultTimeout))
	}
	output := "the configured output limit (split evenly between stdout and stderr)"
	if cfg.MaxOutputBytes > 0 {
		out, errb := driverapi.StreamBudgets(cfg.MaxOutputBytes)
		output = fmt.Sprintf("%d bytes of output (%d for stdout, %d for stderr)", cfg.MaxOutputBytes, out, errb)
	}
	return fmt.Sprintf("Without timeout_seconds a command is killed after %s (timed_out in the result). "+
		"Beyond %s the rest is dropped (truncated in the result).", timeout, output)
}

func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", int64(d/time.Second))
	}
	return fmt.Sprintf("%g s", d.Seconds())
}

func runCommandDescription(cfg Config) string {
	return "Run a command in the aleph-sandbox OS sandbox and return its output when it ends: it sees only its workspace and the system paths a program needs, " +
		"no network and no subprocesses unless asked for (network, spawn), and never the host's environment or secrets. " +
		"Give argv to run a program directly, or command for a shell line (a shell line asks for spawn by itself). " +
		"Requests beyond the session's baseline need the user's approval. " + limitsText(cfg) +
		" For a server, a REPL or a watcher use start_process."
}

// instructions are the server's instructions (initialize's result).
func instructions(cfg Config) string {
	var b strings.Builder
	b.WriteString("aleph-sandbox runs commands in an OS sandbox (a separate filesystem view, no network by default, no access to the host's secrets). ")
	if cfg.Workspace != "" {
		fmt.Fprintf(&b, "Every call runs in the workspace %s (the user's project, writable; cwd is relative to it), in sandbox session %q. ", cfg.Workspace, cfg.Session)
	} else {
		fmt.Fprintf(&b, "Every call runs in the workspace of sandbox session %q, a private directory kept across calls (cwd is relative to it); the user's own files are not in it. ", cfg.Session)
	}
	b.WriteString("Use run_command for a command that ends: argv runs a program directly, command runs a shell line with /bin/sh -c. ")
	if cfg.Baseline.SpawnSubprocess {
		b.WriteString("Shell lines and subprocesses are allowed without asking. ")
	} else {
		b.WriteString("A shell line (or spawn: true) needs permission to start subprocesses: the user is asked once for the session; where the user cannot be asked it is refused, so prefer argv for a single program. ")
	}
	if cfg.Baseline.Network.Mode == driverapi.NetworkNone {
		b.WriteString("The network is off; ask for it with network (all, or a list of hosts), which the user approves. ")
	}
	b.WriteString(limitsText(cfg) + " ")
	b.WriteString("Use start_process for a server, a REPL or a watcher, then read_process, write_process and stop_process; processes share the session's loopback with run_command. ")
	b.WriteString("With layered: true on the session's first run_command, the session works on a layer over the workspace: everything is writable, git included, and the user's files change only when the user applies; changes and diff show what the session changed, and apply brings it to the user's files only with the user's approval (otherwise it names the command the user can run). ")
	b.WriteString("A result with a hint says how to get what the sandbox refused; a denied result (a tool error with denied: true) is the user's or the policy's refusal: do not repeat the same call.")
	return b.String()
}

func boolPtr(v bool) *bool { return &v }

// The tools' annotations. run_command and start_process may change the
// workspace (destructive) and, with network, reach the world; reading
// and listing change nothing (read_process reaps an ended process once
// it has been read to its end: bookkeeping of this server, not a change
// to the user's environment).
var (
	annotateRun = &mcp.ToolAnnotations{Title: "Run a command in the sandbox",
		DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(true)}
	annotateStart = &mcp.ToolAnnotations{Title: "Start a background process in the sandbox",
		DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(true)}
	annotateWrite = &mcp.ToolAnnotations{Title: "Write to a process's input",
		DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(false)}
	annotateRead = &mcp.ToolAnnotations{Title: "Read a process's output",
		ReadOnlyHint: true, OpenWorldHint: boolPtr(false)}
	annotateSignal = &mcp.ToolAnnotations{Title: "Signal a process",
		DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(false)}
	annotateStop = &mcp.ToolAnnotations{Title: "Stop a process",
		DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(false)}
	annotateList = &mcp.ToolAnnotations{Title: "List this session's processes",
		ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)}
)

// Progress of a run_command whose client sent a progress token: the output
// as it comes, in notifications/progress, so a client can show a long
// command's output before it ends.
const (
	// progressInterval is the least time between two notifications: a
	// command that writes a line a millisecond must not become a
	// notification a millisecond.
	progressInterval = 500 * time.Millisecond
	// maxProgressMessage bounds one notification's message: the output
	// since the previous one, its last bytes when there is more (the
	// result has it all, within the output limit).
	maxProgressMessage = 16 << 10
)

// progress sends a call's output as progress notifications. Its Writer
// is given to the command as Stdout and Stderr; it never fails the
// command (a notification that cannot be sent is dropped).
type progress struct {
	ss    *mcp.ServerSession
	token any

	mu      sync.Mutex
	pending []byte
	dropped int64
	total   int64
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// startProgress returns the progress of a call with token, or nil when the
// client sent none.
func startProgress(ctx context.Context, ss *mcp.ServerSession, token any) *progress {
	if token == nil || ss == nil {
		return nil
	}
	p := &progress{ss: ss, token: token, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop(ctx)
	return p
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	p.total += int64(len(b))
	p.pending = append(p.pending, b...)
	if over := len(p.pending) - maxProgressMessage; over > 0 {
		p.dropped += int64(over)
		p.pending = append(p.pending[:0], p.pending[over:]...)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return len(b), nil
}

// finish stops the notifications; the call's result follows them.
func (p *progress) finish() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
}

func (p *progress) loop(ctx context.Context) {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		p.mu.Lock()
		msg, dropped, total := string(p.pending), p.dropped, p.total
		p.pending, p.dropped = p.pending[:0], 0
		p.mu.Unlock()
		if msg != "" {
			if dropped > 0 {
				msg = fmt.Sprintf("[%d bytes not shown]\n%s", dropped, msg)
			}
			// Progress is the output's size so far: it only grows, as
			// the protocol asks; the total is unknown.
			_ = p.ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token,
				Progress: float64(total), Message: strings.ToValidUTF8(msg, "\uFFFD")})
		}
		select {
		case <-p.stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(progressInterval):
		}
	}
}
