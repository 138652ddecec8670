// Package probe is the program the conformance suite runs inside a
// sandbox. One Go program instead of /bin/sh scripts and perl one-liners
// makes every case run the same code on Linux, macOS and Windows, with no
// shell and no interpreter to re-parse its arguments (Windows runs .bat and
// .cmd files through cmd.exe, whose parsing no quoting makes safe).
//
// A command line is the Magic word, then steps separated by Sep:
//
//	probe aleph-conformance-probe write out.txt hello ;; echo done ;; exit 3
//
// A step that fails ends the probe with status 1 (like `set -e`) unless it
// is prefixed with `try`, which reports the failure on stderr and goes on:
// denial cases try the forbidden action and then check the host. The step
// `args` takes every remaining argument verbatim, separators included.
//
// The package uses only the standard library so the probe binary stays
// small: the suite copies it into every case's workspace.
package probe

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Magic is the first argument of every probe command line: it tells a
// binary that embeds the probe (through the conformance package) to act as
// the probe, and marks probe processes so the suite can find survivors.
const Magic = "aleph-conformance-probe"

// Sep separates steps.
const Sep = ";;"

// markLifetime bounds how long a marker child runs: even a host that
// cannot find survivors is clean after it.
const markLifetime = 25 * time.Second

// ExitUsage is the status for a command line the probe does not understand:
// a suite bug, told apart from a step that failed (status 1).
const ExitUsage = 64

// Main runs the steps in args (the arguments after Magic; a leading Magic
// is skipped too) and returns the exit status.
func Main(args []string) int { return Run(args, os.Stdin, os.Stdout, os.Stderr) }

// Run is Main with the standard streams given: tests run steps in
// process. Steps that start children or end the process (spawn, bg,
// daemon, kill) still do so for real.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == Magic {
		args = args[1:]
	}
	steps, err := Parse(args)
	if err != nil {
		fmt.Fprintln(stderr, "probe:", err)
		return ExitUsage
	}
	p := &prober{stdin: stdin, stdout: stdout, stderr: stderr}
	for _, s := range steps {
		code, err := p.run(s)
		if errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "probe: %s: %v\n", s.Name, err)
			return ExitUsage
		}
		if err != nil {
			if s.Try {
				fmt.Fprintf(stderr, "probe: try %s: %v\n", s.Name, err)
				continue
			}
			fmt.Fprintf(stderr, "probe: %s: %v\n", s.Name, err)
			return 1
		}
		if code >= 0 {
			return code
		}
	}
	return 0
}

// Step is one parsed step.
type Step struct {
	Name string
	Args []string
	Try  bool
}

// arity is a step's argument count; -1 is any number.
func arity(step string) (n int, known bool) {
	switch step {
	case "echo", "eecho", "args", "waitmarkers", "net", "ctty":
		return -1, true
	case "env", "pwd", "cat", "listen", "loopback", "unixown", "fds", "clone3", "tty":
		return 0, true
	case "print", "eprint", "hex", "exit", "sleep", "read", "mkdir", "rm", "rmall", "threads", "alloc", "spawn", "kill", "ls", "ps":
		return 1, true
	case "waitfile", "write", "append", "mv", "symlink", "link", "chmod", "cpu", "bg", "daemon", "daemonize", "mark", "sysv":
		return 2, true
	case "flood", "setmode":
		return 3, true
	}
	return 0, false
}

// errUsage is wrapped by every error about a malformed command line.
var errUsage = errors.New("usage")

// Parse splits a probe command line into steps.
func Parse(args []string) ([]Step, error) {
	var steps []Step
	for len(args) > 0 {
		s := Step{}
		if args[0] == "try" {
			s.Try = true
			args = args[1:]
			if len(args) == 0 {
				return nil, fmt.Errorf("%w: try without a step", errUsage)
			}
		}
		s.Name = args[0]
		n, known := arity(s.Name)
		if !known {
			return nil, fmt.Errorf("%w: unknown step %q", errUsage, s.Name)
		}
		args = args[1:]
		if s.Name == "args" {
			// Verbatim: separators too are arguments here.
			s.Args, args = args, nil
		} else {
			i := 0
			for i < len(args) && args[i] != Sep {
				i++
			}
			s.Args = args[:i]
			args = args[i:]
			if len(args) > 0 {
				args = args[1:]
			}
		}
		if n >= 0 && len(s.Args) != n {
			return nil, fmt.Errorf("%w: %s takes %d arguments, got %d", errUsage, s.Name, n, len(s.Args))
		}
		steps = append(steps, s)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("%w: no steps", errUsage)
	}
	return steps, nil
}

type prober struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// run does one step; code >= 0 ends the probe with that status.
func (p *prober) run(s Step) (code int, err error) {
	a := s.Args
	switch s.Name {
	case "echo":
		_, err = fmt.Fprintln(p.stdout, strings.Join(a, " "))
	case "eecho":
		_, err = fmt.Fprintln(p.stderr, strings.Join(a, " "))
	case "print":
		_, err = io.WriteString(p.stdout, a[0])
	case "eprint":
		_, err = io.WriteString(p.stderr, a[0])
	case "hex":
		var b []byte
		if b, err = decodeHex(a[0]); err == nil {
			_, err = p.stdout.Write(b)
		}
	case "args":
		var sb strings.Builder
		for _, x := range a {
			sb.WriteString("[" + x + "]")
		}
		_, err = io.WriteString(p.stdout, sb.String())
	case "env":
		for _, e := range os.Environ() {
			if _, err = fmt.Fprintln(p.stdout, e); err != nil {
				break
			}
		}
	case "pwd":
		var wd string
		if wd, err = os.Getwd(); err == nil {
			_, err = fmt.Fprintln(p.stdout, wd)
		}
	case "cat":
		_, err = io.Copy(p.stdout, p.stdin)
	case "exit":
		n, perr := strconv.Atoi(a[0])
		if perr != nil || n < 0 || n > 255 {
			return -1, fmt.Errorf("%w: exit status %q", errUsage, a[0])
		}
		return n, nil
	case "sleep":
		var d time.Duration
		if d, err = seconds(a[0]); err == nil {
			time.Sleep(d)
		}
	case "waitfile":
		err = p.waitFile(a[0], a[1])
	case "write":
		err = os.WriteFile(a[0], []byte(a[1]), 0o644)
	case "append":
		err = appendFile(a[0], a[1])
	case "read":
		var b []byte
		if b, err = os.ReadFile(a[0]); err == nil {
			_, err = p.stdout.Write(b)
		}
	case "mkdir":
		err = os.MkdirAll(a[0], 0o755)
	case "mv":
		err = os.Rename(a[0], a[1])
	case "rm":
		err = os.Remove(a[0])
	case "rmall":
		err = os.RemoveAll(a[0])
	case "symlink":
		err = os.Symlink(a[0], a[1])
	case "link":
		err = os.Link(a[0], a[1])
	case "chmod":
		err = chmodOctal(a[0], a[1])
	case "setmode":
		err = p.setMode(a[0], a[1], a[2])
	case "flood":
		err = p.flood(a[0], a[1], a[2])
	case "threads":
		err = p.threads(a[0])
	case "alloc":
		err = p.alloc(a[0])
	case "cpu":
		err = p.cpu(a[0], a[1])
	case "spawn":
		err = p.spawn(a[0])
	case "bg":
		err = startChild(false, "mark", a[0], a[1])
	case "daemon":
		// The intermediate child starts the marker in a session (or
		// process group) of its own and exits at once: the classic double
		// fork that leaves an orphan behind.
		err = runSelf("daemonize", a[0], a[1])
	case "daemonize":
		err = startChild(true, "mark", a[0], a[1])
	case "mark":
		mark(a[0])
	case "waitmarkers":
		waitMarkers(a)
	case "kill":
		err = killSelf(a[0])
		if err == nil {
			// The signal ends the process; if it does not, the next step
			// shows it.
			time.Sleep(5 * time.Second)
		}
	case "net":
		err = p.netProbe(a)
	case "listen":
		err = p.listen()
	case "loopback":
		err = p.loopback()
	case "unixown":
		err = p.unixOwn()
	case "fds":
		err = p.fds()
	case "ls":
		err = p.ls(a[0])
	case "clone3":
		err = p.clone3()
	case "ps":
		err = p.procScan(a[0])
	case "sysv":
		err = p.sysv(a[0], a[1])
	case "tty":
		err = p.tty()
	case "ctty":
		err = p.ctty(a)
	default:
		err = fmt.Errorf("%w: unknown step", errUsage)
	}
	return -1, err
}

func seconds(s string) (time.Duration, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 3600 {
		return 0, fmt.Errorf("%w: seconds %q", errUsage, s)
	}
	return time.Duration(f * float64(time.Second)), nil
}

func count(s string, max int64) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > max {
		return 0, fmt.Errorf("%w: count %q", errUsage, s)
	}
	return n, nil
}

func decodeHex(s string) ([]byte, error) {
	if len(s)%2 != 0 {
		return nil, fmt.Errorf("%w: odd hex length", errUsage)
	}
	b := make([]byte, len(s)/2)
	for i := range b {
		v, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("%w: hex %q", errUsage, s)
		}
		b[i] = byte(v)
	}
	return b, nil
}

func appendFile(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// waitFile polls for path, which the host creates; a missing file after
// the limit is an error.
func (p *prober) waitFile(path, limit string) error {
	d, err := seconds(limit)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(d)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s", path, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// flood writes n copies of one byte (decimal) to stdout or stderr in 64 KiB
// writes.
func (p *prober) flood(stream, n, char string) error {
	total, err := count(n, 1<<40)
	if err != nil {
		return err
	}
	c, err := count(char, 255)
	if err != nil {
		return err
	}
	w := p.stdout
	switch stream {
	case "out":
	case "err":
		w = p.stderr
	default:
		return fmt.Errorf("%w: stream %q", errUsage, stream)
	}
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = byte(c)
	}
	for total > 0 {
		k := min(total, int64(len(chunk)))
		if _, err := w.Write(chunk[:k]); err != nil {
			return err
		}
		total -= k
	}
	return nil
}

// threads computes 2*1 + ... + 2*n on n goroutines, each locked to an OS
// thread of its own.
func (p *prober) threads(n string) error {
	k, err := count(n, 256)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	sums := make([]int64, k)
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			sums[i] = 2 * (i + 1)
		}()
	}
	wg.Wait()
	var s int64
	for _, v := range sums {
		s += v
	}
	_, err = fmt.Fprintf(p.stdout, "sum=%d\n", s)
	return err
}

// alloc allocates and touches mb MiB, so the pages are really committed.
func (p *prober) alloc(mb string) error {
	n, err := count(mb, 1<<20)
	if err != nil {
		return err
	}
	b := make([]byte, n<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	_, err = fmt.Fprintf(p.stdout, "allocated:%d\n", len(b)>>20)
	runtime.KeepAlive(b)
	return err
}

// cpu spins n threads for secs of wall time and prints the CPU time the
// process used.
func (p *prober) cpu(secs, n string) error {
	d, err := seconds(secs)
	if err != nil {
		return err
	}
	k, err := count(n, 64)
	if err != nil {
		return err
	}
	before := cpuTime()
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			x := 0
			for time.Now().Before(end) {
				for i := range 10000 {
					x += i
				}
			}
			runtime.KeepAlive(x)
		}()
	}
	wg.Wait()
	_, err = fmt.Fprintf(p.stdout, "cpu=%.3f\n", (cpuTime() - before).Seconds())
	return err
}

// self is the probe's own executable, to start as a child.
func self() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return os.Args[0]
}

// spawn runs the probe as a child that exits with code and reports the
// status it saw.
func (p *prober) spawn(code string) error {
	want, err := count(code, 255)
	if err != nil {
		return err
	}
	cmd := exec.Command(self(), Magic, "exit", code)
	cmd.SysProcAttr = childAttr(false)
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return err
	}
	got := cmd.ProcessState.ExitCode()
	if int64(got) != want {
		return fmt.Errorf("child exited %d, want %d", got, want)
	}
	_, err = fmt.Fprintf(p.stdout, "child=%d\n", got)
	return err
}

// runSelf runs the probe with one step and waits for it.
func runSelf(step string, args ...string) error {
	cmd := exec.Command(self(), append([]string{Magic, step}, args...)...)
	cmd.SysProcAttr = childAttr(false)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startChild starts the probe with one step, its stdio on the null device,
// and does not wait: the child outlives this step.
func startChild(detach bool, step string, args ...string) error {
	cmd := exec.Command(self(), append([]string{Magic, step}, args...)...)
	cmd.SysProcAttr = childAttr(detach)
	err := cmd.Start()
	if err != nil && detach {
		// Some hosts refuse the stronger detach (e.g. a Job Object without
		// breakaway); a plain background child is still a descendant to
		// kill.
		cmd = exec.Command(self(), append([]string{Magic, step}, args...)...)
		cmd.SysProcAttr = childAttr(false)
		err = cmd.Start()
	}
	if err != nil {
		return err
	}
	return cmd.Process.Release()
}

// mark appends a line to marker every 50 ms for markLifetime, ignoring
// the polite signals: it is the descendant a driver must kill.
func mark(marker string) {
	signal.Ignore(politeSignals()...)
	end := time.Now().Add(markLifetime)
	for time.Now().Before(end) {
		if err := appendFile(marker, "x\n"); err != nil {
			os.Exit(1)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMarkers waits up to five seconds for every marker file to be
// written; the host checks what happened.
func waitMarkers(markers []string) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		all := true
		for _, m := range markers {
			if st, err := os.Stat(m); err != nil || st.Size() == 0 {
				all = false
			}
		}
		if all {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// netProbe prints probe-start (the positive control that it ran), tries
// one connection and sends token; `reply:` shows what came back.
//
//	net tcp HOST PORT TOKEN | net udp HOST PORT TOKEN | net unix PATH TOKEN |
//	net unixgram PATH TOKEN | net abstract NAME TOKEN | net proxy HOST:PORT TOKEN
func (p *prober) netProbe(a []string) error {
	if len(a) < 3 {
		return fmt.Errorf("%w: net KIND ... TOKEN", errUsage)
	}
	kind, token := a[0], a[len(a)-1]
	rest := a[1 : len(a)-1]
	fmt.Fprintln(p.stdout, "probe-start")
	var (
		c   net.Conn
		err error
	)
	switch {
	case (kind == "tcp" || kind == "udp") && len(rest) == 2:
		network := kind
		addr := net.JoinHostPort(rest[0], rest[1])
		if kind == "udp" {
			return p.sendDatagrams(network, addr, token)
		}
		c, err = net.DialTimeout(network, addr, 3*time.Second)
	case kind == "unix" && len(rest) == 1:
		c, err = net.DialTimeout("unix", rest[0], 3*time.Second)
	case kind == "unixgram" && len(rest) == 1:
		return p.sendDatagrams("unixgram", rest[0], token)
	case kind == "abstract" && len(rest) == 1:
		c, err = net.DialTimeout("unix", "@"+rest[0], 3*time.Second)
	case kind == "proxy" && len(rest) == 1:
		c, err = p.viaProxy(rest[0])
	default:
		return fmt.Errorf("%w: net %s with %d arguments", errUsage, kind, len(rest))
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, token+"\n"); err != nil {
		return err
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	_, err = fmt.Fprintf(p.stdout, "reply:%s", line)
	return err
}

// sendDatagrams sends the token three times to addr and says how many
// datagrams left.
func (p *prober) sendDatagrams(network, addr, token string) error {
	c, err := net.Dial(network, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	n := 0
	for range 3 {
		if _, err := c.Write([]byte(token + "\n")); err == nil {
			n++
		}
	}
	fmt.Fprintf(p.stdout, "sent:%d\n", n)
	if n == 0 {
		return errors.New("no datagram sent")
	}
	return nil
}

// chmodOctal sets path's mode from an octal string, set-user-id (4000),
// set-group-id (2000) and sticky (1000) bits included.
func chmodOctal(mode, path string) error {
	n, err := strconv.ParseUint(mode, 8, 32)
	if err != nil || n > 0o7777 {
		return fmt.Errorf("%w: mode %q", errUsage, mode)
	}
	m := os.FileMode(n & 0o777)
	if n&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if n&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if n&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return os.Chmod(path, m)
}

// setMode gives path an octal mode by the named route (SetModeRoutes; the
// routes differ by system call, not by outcome), printing
// "tried:ROUTE:MODE" first, so the suite sees the attempt was made even
// when it is refused, and "set:ROUTE:MODE" when the call succeeded.
func (p *prober) setMode(route, mode, path string) error {
	n, err := strconv.ParseUint(mode, 8, 32)
	if err != nil || n > 0o7777 {
		return fmt.Errorf("%w: mode %q", errUsage, mode)
	}
	fmt.Fprintf(p.stdout, "tried:%s:%s\n", route, mode)
	if err := setModeRoute(route, uint32(n), path); err != nil {
		return fmt.Errorf("%s %s %s: %w", route, mode, path, err)
	}
	_, err = fmt.Fprintf(p.stdout, "set:%s:%s\n", route, mode)
	return err
}

// viaProxy opens a CONNECT tunnel to hostPort through $HTTPS_PROXY.
func (p *prober) viaProxy(hostPort string) (net.Conn, error) {
	m := regexp.MustCompile(`^http://\[?([^\]/]+?)\]?:(\d+)/?$`).FindStringSubmatch(os.Getenv("HTTPS_PROXY"))
	if m == nil {
		return nil, errors.New("no usable HTTPS_PROXY")
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(m[1], m[2]), 3*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostPort, hostPort)
	r := bufio.NewReader(c)
	status, _ := r.ReadString('\n')
	fmt.Fprintf(p.stdout, "proxy-status:%s", status)
	if !strings.HasPrefix(status, "HTTP/1.1 200") && !strings.HasPrefix(status, "HTTP/1.0 200") {
		c.Close()
		return nil, fmt.Errorf("proxy said %q", strings.TrimSpace(status))
	}
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, err
		}
		if l == "\r\n" || l == "\n" {
			break
		}
	}
	if r.Buffered() > 0 {
		c.Close()
		return nil, errors.New("proxy sent data before the tunnel opened")
	}
	return c, nil
}

// listen opens a TCP listener, prints its port and waits two seconds for
// one connection.
func (p *prober) listen() error {
	fmt.Fprintln(p.stdout, "probe-start")
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Fprintf(p.stdout, "port:%d\n", l.Addr().(*net.TCPAddr).Port)
	if tl, ok := l.(*net.TCPListener); ok {
		_ = tl.SetDeadline(time.Now().Add(2 * time.Second))
	}
	c, err := l.Accept()
	if err != nil {
		fmt.Fprintln(p.stdout, "no-connection")
		return nil
	}
	c.Close()
	fmt.Fprintln(p.stdout, "accepted")
	return nil
}

// loopback listens on 127.0.0.1 (TCP and UDP), connects to itself and
// exchanges a line each way; it prints "loopback-tcp-ok" and
// "loopback-udp-ok" for what worked.
func (p *prober) loopback() error {
	fmt.Fprintln(p.stdout, "probe-start")
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("loopback listen: %w", err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = io.WriteString(c, "echo:"+line)
	}()
	c, err := net.DialTimeout("tcp4", l.Addr().String(), 3*time.Second)
	if err != nil {
		return fmt.Errorf("loopback connect: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	if line, _ := bufio.NewReader(c).ReadString('\n'); line != "echo:ping\n" {
		return fmt.Errorf("loopback reply %q", line)
	}
	fmt.Fprintln(p.stdout, "loopback-tcp-ok")
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("loopback udp: %w", err)
	}
	defer pc.Close()
	u, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		return fmt.Errorf("loopback udp dial: %w", err)
	}
	defer u.Close()
	if _, err := u.Write([]byte("dgram")); err != nil {
		return err
	}
	_ = pc.SetDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 16)
	if n, _, err := pc.ReadFrom(buf); err != nil || string(buf[:n]) != "dgram" {
		return fmt.Errorf("loopback udp read: %q %v", buf[:n], err)
	}
	_, err = fmt.Fprintln(p.stdout, "loopback-udp-ok")
	return err
}

// unixOwn uses unix sockets of the program's own, in its working
// directory (relative names: a workspace's absolute path may exceed
// sun_path): a stream listener it connects to, a datagram socket it sends
// to, a datagram socket pair and, on Linux, an abstract name. It prints
// "unix-own-stream-ok", "unix-own-dgram-ok", "unix-own-pair-ok" and
// "unix-own-abstract-ok" (or "unix-own-abstract-none" where abstract
// names do not exist) as each works, and removes what it bound.
func (p *prober) unixOwn() error {
	fmt.Fprintln(p.stdout, "probe-start")
	tag := strconv.Itoa(os.Getpid())
	echo := func(network, addr string) error {
		l, err := net.Listen(network, addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		defer l.Close()
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			_, _ = io.WriteString(c, "echo:"+line)
		}()
		c, err := net.DialTimeout(network, addr, 3*time.Second)
		if err != nil {
			return fmt.Errorf("connect %s: %w", addr, err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			return err
		}
		if line, _ := bufio.NewReader(c).ReadString('\n'); line != "echo:ping\n" {
			return fmt.Errorf("reply on %s: %q", addr, line)
		}
		return nil
	}
	stream := "own-" + tag + ".sock"
	defer os.Remove(stream)
	if err := echo("unix", stream); err != nil {
		return err
	}
	fmt.Fprintln(p.stdout, "unix-own-stream-ok")
	dgram := "own-" + tag + ".dgram"
	defer os.Remove(dgram)
	pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: dgram, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("datagram bind: %w", err)
	}
	defer pc.Close()
	u, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: dgram, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("datagram connect: %w", err)
	}
	defer u.Close()
	if _, err := u.Write([]byte("dgram")); err != nil {
		return fmt.Errorf("datagram send: %w", err)
	}
	_ = pc.SetDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 16)
	if n, _, err := pc.ReadFrom(buf); err != nil || string(buf[:n]) != "dgram" {
		return fmt.Errorf("datagram read: %q %v", buf[:n], err)
	}
	fmt.Fprintln(p.stdout, "unix-own-dgram-ok")
	if err := datagramPair(); err != nil {
		return fmt.Errorf("datagram socket pair: %w", err)
	}
	fmt.Fprintln(p.stdout, "unix-own-pair-ok")
	if runtime.GOOS != "linux" {
		_, err = fmt.Fprintln(p.stdout, "unix-own-abstract-none")
		return err
	}
	if err := echo("unix", "@aleph-conformance-own-"+tag); err != nil {
		return err
	}
	_, err = fmt.Fprintln(p.stdout, "unix-own-abstract-ok")
	return err
}

// fds prints "fd:N:TARGET" for every open descriptor above 2, then
// "fds-checked". Run first, it sees what the driver handed the program:
// the Go runtime opens nothing before main.
func (p *prober) fds() error {
	open, err := openFDs()
	if err != nil {
		return err
	}
	for _, fd := range open {
		fmt.Fprintf(p.stdout, "fd:%d:%s\n", fd, fdTarget(fd))
	}
	_, err = fmt.Fprintln(p.stdout, "fds-checked")
	return err
}

// ls prints the names in dir, one a line.
func (p *prober) ls(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if _, err := fmt.Fprintln(p.stdout, e.Name()); err != nil {
			return err
		}
	}
	return nil
}
