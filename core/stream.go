package core

import (
	"context"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Streamed and terminal commands (Command.StdinStream, Command.Tty): they
// run through the driver's RunStream (protocol 1.2), which only a driver
// that lists the run_stream call and claims the features has.

// streamed reports whether cmd needs RunStream.
func (cmd Command) streamed() bool { return cmd.StdinStream != nil || cmd.Tty != nil }

// validateStream checks the streaming fields of cmd (part of
// validateCommand: their form, nothing about the driver).
func validateStream(cmd Command) error {
	bad := func(field, reason string) error { return &InvalidCommandError{Field: field, Reason: reason} }
	switch {
	case cmd.StdinStream != nil && len(cmd.Stdin) > 0:
		return bad("stdin", "set Stdin or StdinStream, not both")
	case cmd.Tty != nil && len(cmd.Stdin) > 0:
		return bad("stdin", "a terminal command takes its input from StdinStream")
	case cmd.Resize != nil && cmd.Tty == nil:
		return bad("resize", "window sizes need a terminal (Tty)")
	}
	return nil
}

// streamFeatures lists what the driver must claim to run cmd.
func streamFeatures(cmd Command) []string {
	var f []string
	if cmd.StdinStream != nil {
		f = append(f, driverapi.FeatureStdinStream)
	}
	if cmd.Tty != nil {
		f = append(f, driverapi.FeaturePTY)
	}
	return f
}

// streamable refuses cmd when the driver cannot run it as asked: an older
// driver (no run_stream call) or one that does not claim the features.
// The refusal names the feature, as for any capability the driver cannot
// enforce; nothing runs without the stream it was promised.
func (s *WorkspaceSandbox) streamable(hc driverapi.HostCapabilities, cmd Command) error {
	if !cmd.streamed() {
		return nil
	}
	feats := streamFeatures(cmd)
	_, ok := s.driver.(driverapi.StreamRunner)
	if !ok || !hc.Supports(driverapi.CallRunStream) {
		return &DeniedError{Code: ReasonUnenforceable, Feature: feats[0],
			Reason: hc.UnsupportedCall(hc.Backend, driverapi.CallRunStream, feats[0]).Error()}
	}
	return unenforceable(hc, "give", feats)
}

// runDriver runs spec through Run, or RunStream for a streamed command.
func (s *WorkspaceSandbox) runDriver(ctx context.Context, cmd Command, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	if !cmd.streamed() {
		return s.driver.Run(ctx, spec, streams)
	}
	// streamable checked the driver is a StreamRunner.
	sr := s.driver.(driverapi.StreamRunner)
	spec.Tty = cmd.Tty
	return sr.RunStream(ctx, spec, driverapi.StreamInput{Stdin: cmd.StdinStream, Resize: cmd.Resize}, streams)
}
