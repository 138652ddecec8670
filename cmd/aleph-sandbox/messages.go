package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// userMessage is err as the CLI shows it: a command field the core refuses
// is named by the flag (or argument) that set it, with the core's reason,
// never by a Go API name (the error's Hint is for Go callers).
func userMessage(err error) string {
	var ie *core.InvalidCommandError
	if errors.As(err, &ie) {
		if f := flagOfField(ie.Field); f != "" {
			return f + ": " + ie.Reason
		}
		return "invalid " + ie.Field + ": " + ie.Reason
	}
	return err.Error()
}

// flagOfField is what sets a command field, as core.InvalidCommandError
// names the field, on exec's command line ("" for a field no flag sets).
func flagOfField(field string) string {
	switch field {
	case "session_id":
		return "--session"
	case "program":
		return "PROGRAM"
	case "cwd":
		return "--cwd"
	case "workspace":
		return "--workspace"
	case "timeout", "capabilities.timeout_secs":
		return "--timeout"
	case "max_output_bytes":
		return "--max-output"
	case "stdin":
		return "--stdin"
	case "host":
		return "--net"
	}
	switch {
	case strings.HasPrefix(field, "args["):
		if i, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(field, "args["), "]")); err == nil {
			return "ARG " + strconv.Itoa(i+1)
		}
	case strings.HasPrefix(field, "env "):
		return "--env " + strings.TrimPrefix(field, "env ")
	case strings.HasPrefix(field, "capabilities.fs_read"):
		return "--read"
	case strings.HasPrefix(field, "capabilities.fs_write"):
		return "--write"
	case strings.HasPrefix(field, "capabilities.network"):
		return "--net"
	case strings.HasPrefix(field, "capabilities.max_memory"):
		return "--memory"
	}
	return ""
}
