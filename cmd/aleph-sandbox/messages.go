package main

import (
	"errors"
	"strconv"
	"strings"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// userMessage is err as the CLI shows it: a command field the core refuses
// is named by the flag (or argument) that set it, with the core's reason,
// never by a Go API name (the error's Hint is for Go callers).
func userMessage(err error) string {
	var re *alephsandbox.RequestError
	if errors.As(err, &re) {
		if f := flagOfRequestField(re.Field); f != "" {
			return f + ": " + re.Reason
		}
		return "invalid " + re.Field + ": " + re.Reason
	}
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

// flagOfRequestField is what sets a request field, as
// alephsandbox.RequestError names it (the service's protocol names), on
// exec's command line.
func flagOfRequestField(field string) string {
	switch field {
	case "session":
		return "--session"
	case "argv":
		return "PROGRAM"
	case "workspace":
		return "--workspace"
	case "net":
		return "--net"
	case "timeout_seconds":
		return "--timeout"
	case "max_output":
		return "--max-output"
	case "stdin":
		return "--stdin"
	case "env":
		return "--env"
	case "cwd":
		return "--cwd"
	case "memory_mb":
		return "--memory"
	}
	switch {
	case strings.HasPrefix(field, "argv["):
		return "ARG " + strings.TrimSuffix(strings.TrimPrefix(field, "argv["), "]")
	case strings.HasPrefix(field, "read["):
		return "--read"
	case strings.HasPrefix(field, "write["):
		return "--write"
	}
	return ""
}

// requestReason is a request error's reason alone (the caller names the
// flag), or the error.
func requestReason(err error) string {
	var re *alephsandbox.RequestError
	if errors.As(err, &re) {
		return re.Reason
	}
	return err.Error()
}
