package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func protocolCases() []Case {
	return []Case{
		{ID: "protocol/handshake", Level: Must, fresh: true,
			Description: "The binary starts as a go-plugin gRPC driver, answers Capabilities, reports a process id, and its process ends when the host kills it.",
			run:         caseHandshake},
		{ID: "protocol/version-mismatch", Level: Must, fresh: true,
			Description: "A host offering protocol version+1 is refused at the handshake with a ProtocolMismatchError naming both versions; the same binary starts normally at the current version.",
			run:         caseVersionMismatch},
		{ID: "protocol/capabilities-well-formed", Level: Must,
			Description: "Capabilities names a backend, driver version, OS and arch, reports the current protocol version, claims only known feature names, each once, and never claims a feature it also lists as unavailable; every unavailable entry has a known feature and a reason.",
			run:         caseCapsWellFormed},
		{ID: "protocol/capabilities-stable", Level: Should,
			Description: "Two Capabilities calls on the same host give the same backend and features.",
			run:         caseCapsStable},
		{ID: "protocol/profile-deterministic", Level: Must,
			Description: "ProfileFor gives byte-identical profiles for equal requests, with the driver's backend name and a digest that matches the data.",
			run:         caseProfileDeterministic},
		{ID: "protocol/profile-tampered-refused", Level: Must, fresh: true,
			Description: "Run refuses a profile whose data had one byte flipped (digest no longer matches); the untampered profile runs.",
			run: ownPlugin(func(ctx context.Context, h *H) error {
				return garbled(ctx, h, func(p *driverapi.Profile) {
					if len(p.Data) == 0 {
						p.Data = []byte{0}
						return
					}
					p.Data = bytes.Clone(p.Data)
					p.Data[len(p.Data)/2] ^= 0x01
				})
			})},
		{ID: "protocol/profile-wrong-digest-refused", Level: Must, fresh: true,
			Description: "Run refuses a profile whose digest is not the SHA-256 of its data; the intact profile runs.",
			run: ownPlugin(func(ctx context.Context, h *H) error {
				return garbled(ctx, h, func(p *driverapi.Profile) { p.Digest = driverapi.Digest([]byte("not the profile")) })
			})},
		{ID: "protocol/profile-wrong-backend-refused", Level: Must, fresh: true,
			Description: "Run refuses an intact profile labelled with another backend's name; the original runs.",
			run: ownPlugin(func(ctx context.Context, h *H) error {
				return garbled(ctx, h, func(p *driverapi.Profile) { p.Backend += "-other" })
			})},
		{ID: "protocol/profile-empty-refused", Level: Must, fresh: true,
			Description: "Run refuses the zero Profile (no backend, no data, no digest); a real profile runs.",
			run: ownPlugin(func(ctx context.Context, h *H) error {
				return garbled(ctx, h, func(p *driverapi.Profile) { *p = driverapi.Profile{} })
			})},
		{ID: "protocol/invalid-spec-refused", Level: Must, fresh: true,
			Description: "Run refuses specs with an empty program, a relative cwd, a zero timeout, a zero output budget, a NUL in an argument, an '=' in an env name or stdin over driverapi.MaxStdinBytes with an error, and still runs a valid spec afterwards.",
			run:         ownPlugin(caseInvalidSpec)},
		{ID: "protocol/concurrent-runs", Level: Must, fresh: true,
			Description: "Eight Run calls at once on one driver each get exactly their own output and exit code.",
			run:         ownPlugin(caseConcurrentRuns)},
		{ID: "protocol/cancel-mid-run", Level: Must, fresh: true,
			Description: "Cancelling the context of a running command ends Run promptly (the command had started and produced output), and the driver then runs the next command normally.",
			run:         ownPlugin(caseCancelMidRun)},
	}
}

func caseHandshake(ctx context.Context, h *H) error {
	p, err := h.launch(ctx, nil)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	caps, err := p.Driver().Capabilities(ctx)
	if err != nil {
		return fmt.Errorf("Capabilities: %w", err)
	}
	if caps.Backend == "" {
		return errors.New("Capabilities: empty backend name")
	}
	if p.Pid() <= 0 {
		return fmt.Errorf("plugin pid %d: the host cannot see the plugin process", p.Pid())
	}
	p.Kill()
	if !waitFor(ctx, 5*time.Second, p.Exited) {
		return errors.New("plugin process still running after Kill")
	}
	if alive, known := processAlive(p.Pid()); known && alive {
		return fmt.Errorf("plugin process %d still exists after Kill", p.Pid())
	}
	return nil
}

func caseVersionMismatch(ctx context.Context, h *H) error {
	want := driverapi.ProtocolVersion + 1
	_, err := h.launch(ctx, func(lc *driverapi.LaunchConfig) { lc.HostProtocolVersion = want })
	if err == nil {
		return fmt.Errorf("a host offering protocol %d was accepted", want)
	}
	var pm *driverapi.ProtocolMismatchError
	if !errors.As(err, &pm) {
		return fmt.Errorf("want *driverapi.ProtocolMismatchError, got %T: %v", err, err)
	}
	if pm.HostVer != want || pm.PluginVer != driverapi.ProtocolVersion {
		return fmt.Errorf("mismatch error says plugin %d host %d, want plugin %d host %d", pm.PluginVer, pm.HostVer, driverapi.ProtocolVersion, want)
	}
	msg := pm.Error()
	if !strings.Contains(msg, fmt.Sprint(want)) || !strings.Contains(msg, fmt.Sprint(driverapi.ProtocolVersion)) {
		return fmt.Errorf("mismatch message does not name both versions: %q", msg)
	}
	// Positive control: the same binary at the current version starts.
	p, err := h.launch(ctx, nil)
	if err != nil {
		return fmt.Errorf("launch at the current version: %w", err)
	}
	if _, err := p.Driver().Capabilities(ctx); err != nil {
		return fmt.Errorf("Capabilities at the current version: %w", err)
	}
	return nil
}

func caseCapsWellFormed(ctx context.Context, h *H) error {
	c, err := h.Driver.Capabilities(ctx)
	if err != nil {
		return err
	}
	var probs []string
	if c.Backend == "" {
		probs = append(probs, "empty backend")
	}
	if c.DriverVersion == "" {
		probs = append(probs, "empty driver_version")
	}
	if c.ProtocolVersion != driverapi.ProtocolVersion {
		probs = append(probs, fmt.Sprintf("protocol_version %d, want %d", c.ProtocolVersion, driverapi.ProtocolVersion))
	}
	if c.OS == "" || c.Arch == "" {
		probs = append(probs, "empty os or arch")
	}
	seen := map[string]bool{}
	for _, f := range c.Features {
		if !driverapi.IsKnownFeature(f) {
			probs = append(probs, fmt.Sprintf("unknown feature %q claimed", f))
		}
		if seen[f] {
			probs = append(probs, fmt.Sprintf("feature %q claimed twice", f))
		}
		seen[f] = true
	}
	for _, u := range c.Unavailable {
		if !driverapi.IsKnownFeature(u.Feature) {
			probs = append(probs, fmt.Sprintf("unknown feature %q listed unavailable", u.Feature))
		}
		if seen[u.Feature] {
			probs = append(probs, fmt.Sprintf("feature %q both claimed and unavailable", u.Feature))
		}
		if strings.TrimSpace(u.Reason) == "" {
			probs = append(probs, fmt.Sprintf("unavailable %q has no reason", u.Feature))
		}
	}
	if len(probs) > 0 {
		return errors.New(strings.Join(probs, "; "))
	}
	return nil
}

func caseCapsStable(ctx context.Context, h *H) error {
	a, err := h.Driver.Capabilities(ctx)
	if err != nil {
		return err
	}
	b, err := h.Driver.Capabilities(ctx)
	if err != nil {
		return err
	}
	if a.Backend != b.Backend || strings.Join(a.Features, ",") != strings.Join(b.Features, ",") {
		return fmt.Errorf("first call: %s %v; second: %s %v", a.Backend, a.Features, b.Backend, b.Features)
	}
	return nil
}

func caseProfileDeterministic(ctx context.Context, h *H) error {
	caps := driverapi.Capabilities{FSRead: []string{h.Out}, SpawnSubprocess: true, TimeoutSecs: 30}
	a, err := h.profile(ctx, h.Driver, caps, "", nil)
	if err != nil {
		return fmt.Errorf("ProfileFor: %w", err)
	}
	b, err := h.profile(ctx, h.Driver, caps, "", nil)
	if err != nil {
		return fmt.Errorf("ProfileFor (second): %w", err)
	}
	if !bytes.Equal(a.Data, b.Data) || a.Digest != b.Digest || a.Backend != b.Backend {
		return fmt.Errorf("equal requests gave different profiles (digests %s, %s)", a.Digest, b.Digest)
	}
	if a.Backend != h.Caps.Backend {
		return fmt.Errorf("profile backend %q, driver backend %q", a.Backend, h.Caps.Backend)
	}
	if a.Digest != driverapi.Digest(a.Data) {
		return errors.New("profile digest is not the SHA-256 of its data")
	}
	return nil
}

// garbled runs a profile damaged by mutate (must be refused), then the
// intact one (must run).
func garbled(ctx context.Context, h *H, mutate func(*driverapi.Profile)) error {
	p, err := h.profile(ctx, h.Driver, defaultCaps(), "", nil)
	if err != nil {
		return fmt.Errorf("ProfileFor: %w", err)
	}
	marker := filepath.Join(h.Work, "ran")
	c, err := h.resolve(h.ProbeCmd(Cmd{}, "write", marker, "ran\n", sep, "echo", "ran"))
	if err != nil {
		return err
	}
	bad := p
	mutate(&bad)
	o := h.run(ctx, h.Driver, h.spec(c, bad), nil)
	if o.Err == nil {
		return fmt.Errorf("damaged profile was accepted: %s", o)
	}
	if err := mustNotExist(marker, "damaged profile"); err != nil {
		return err
	}
	var pe *driverapi.ProfileError
	if !errors.As(o.Err, &pe) {
		// Any error refuses; a typed one is what hosts can act on.
		if !strings.Contains(strings.ToLower(o.Err.Error()), "profile") {
			return fmt.Errorf("refused, but the error does not say the profile is invalid: %v", o.Err)
		}
	}
	good := h.run(ctx, h.Driver, h.spec(c, p), nil)
	if err := ok("intact profile", good); err != nil {
		return err
	}
	return ran("intact profile", good, "ran")
}

func caseInvalidSpec(ctx context.Context, h *H) error {
	p, err := h.profile(ctx, h.Driver, defaultCaps(), "", nil)
	if err != nil {
		return fmt.Errorf("ProfileFor: %w", err)
	}
	c, err := h.resolve(h.ProbeCmd(Cmd{}, "echo", "valid"))
	if err != nil {
		return err
	}
	base := h.spec(c, p)
	bad := map[string]func(*driverapi.RunSpec){
		"empty program": func(s *driverapi.RunSpec) { s.Program = "" },
		"relative cwd":  func(s *driverapi.RunSpec) { s.Cwd = "ws" },
		"zero timeout":  func(s *driverapi.RunSpec) { s.Timeout = 0 },
		"zero budget":   func(s *driverapi.RunSpec) { s.MaxOutputBytes = 0 },
		"NUL in an argument": func(s *driverapi.RunSpec) {
			s.Args = append(append([]string{}, s.Args...), "a\x00b")
		},
		"'=' in an env name": func(s *driverapi.RunSpec) {
			s.Env = append(append([]driverapi.EnvVar{}, s.Env...), driverapi.EnvVar{Name: "A=B", Value: "x"})
		},
		"stdin over the limit": func(s *driverapi.RunSpec) { s.Stdin = make([]byte, driverapi.MaxStdinBytes+1) },
	}
	for name, mut := range bad {
		s := base
		mut(&s)
		if o := h.run(ctx, h.Driver, s, nil); o.Err == nil {
			return fmt.Errorf("%s: accepted (%s)", name, o)
		}
	}
	o := h.run(ctx, h.Driver, base, nil)
	if err := ok("valid spec", o); err != nil {
		return err
	}
	return ran("valid spec", o, "valid")
}

func caseConcurrentRuns(ctx context.Context, h *H) error {
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := h.Probe(ctx, nil, "echo", fmt.Sprintf("out-%d", i), sep, "eecho", fmt.Sprintf("err-%d", i), sep, "exit", fmt.Sprint(i+3))
			switch {
			case o.Err != nil:
				errs[i] = o.Err
			case string(o.Stdout) != fmt.Sprintf("out-%d\n", i) || string(o.Stderr) != fmt.Sprintf("err-%d\n", i) || o.Exit.ExitCode != int32(i+3):
				errs[i] = fmt.Errorf("command %d got %s", i, o)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func caseCancelMidRun(ctx context.Context, h *H) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	started := make(chan struct{})
	done := make(chan Out, 1)
	go func() {
		done <- h.Exec(runCtx, h.ProbeCmd(Cmd{OnStdout: func([]byte) { once.Do(func() { close(started) }) }},
			"echo", "started", sep, "sleep", "30"))
	}()
	select {
	case <-started:
	case o := <-done:
		return fmt.Errorf("command ended before it was cancelled: %s", o)
	case <-ctx.Done():
		return errors.New("the command never produced output")
	}
	cancel()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case o := <-done:
		if o.Err == nil && o.Exit.ExitCode == 0 && o.Exit.Signal == 0 {
			return fmt.Errorf("cancelled command reported success: %s", o)
		}
	case <-t.C:
		return errors.New("Run did not return within 10s of cancellation")
	}
	o := h.Probe(ctx, nil, "echo", "after")
	if err := ok("command after cancel", o); err != nil {
		return err
	}
	return ran("command after cancel", o, "after")
}

// ownPlugin runs f against a plugin process of its own: protocol cases
// that feed the driver bad input or cancel it mid-command must not leave a
// damaged driver to the cases after them.
func ownPlugin(f func(context.Context, *H) error) func(context.Context, *H) error {
	return func(ctx context.Context, h *H) error {
		if err := h.useFresh(ctx); err != nil {
			return err
		}
		return f(ctx, h)
	}
}
