package appcontainer

import (
	"fmt"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Windows passes a process one command-line string, which the child splits
// back into argv with CommandLineToArgvW's rules (the same as the
// Microsoft C runtime's since 2008):
//
//   - arguments are separated by spaces or tabs outside quotes;
//   - 2n backslashes followed by a quote give n backslashes and toggle
//     quoting; 2n+1 backslashes followed by a quote give n backslashes and a
//     literal quote; backslashes not followed by a quote are literal;
//   - inside quotes, "" gives a literal quote and stays in quotes;
//   - the program name (argv[0]) is special: it runs to the next space or
//     tab, or, when it starts with a quote, to the next quote, with no
//     backslash processing at all.
//
// QuoteArg and CommandLine build strings that SplitCommandLine (a portable
// implementation of those rules) turns back into the same argv; the tests
// check that round trip on a table of hostile arguments.

// QuoteArg quotes one argument (not the program name) so the C runtime
// reads it back verbatim.
func QuoteArg(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\v\"") {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	slashes := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			slashes++
		case '"':
			// Double the backslashes before a quote, then escape it.
			b.WriteString(strings.Repeat(`\`, slashes*2+1))
			b.WriteByte('"')
			slashes = 0
			continue
		default:
			b.WriteString(strings.Repeat(`\`, slashes))
			slashes = 0
			b.WriteByte(c)
			continue
		}
	}
	// Trailing backslashes precede the closing quote: double them.
	b.WriteString(strings.Repeat(`\`, slashes*2))
	b.WriteByte('"')
	return b.String()
}

// quoteProgram quotes argv[0]. Its rules have no escapes, so a program
// path holding a quote cannot be expressed; Windows file names cannot
// contain one anyway.
func quoteProgram(p string) (string, error) {
	if strings.ContainsRune(p, '"') {
		return "", &driverapi.InvalidSpecError{Field: "program", Reason: fmt.Sprintf("%q contains a double quote, which no Windows path can hold", p)}
	}
	if p == "" {
		return "", &driverapi.InvalidSpecError{Field: "program", Reason: "empty"}
	}
	return `"` + p + `"`, nil
}

// CommandLine builds the lpCommandLine string for program and args. It is
// bounded by the 32767 UTF-16 unit limit of CreateProcess.
func CommandLine(program string, args []string) (string, error) {
	prog, err := quoteProgram(program)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(prog)
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(QuoteArg(a))
	}
	if n := utf16Len(b.String()); n >= 32767 {
		return "", &driverapi.InvalidSpecError{Field: "args", Reason: fmt.Sprintf("the command line is %d UTF-16 units; Windows allows at most 32766", n)}
	}
	return b.String(), nil
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// SplitCommandLine parses a command line exactly as CommandLineToArgvW
// does. It exists so the quoting can be tested without Windows.
func SplitCommandLine(cmd string) []string {
	var argv []string
	i := 0
	// argv[0]: no escapes.
	var prog strings.Builder
	if i < len(cmd) && cmd[i] == '"' {
		i++
		for i < len(cmd) && cmd[i] != '"' {
			prog.WriteByte(cmd[i])
			i++
		}
		if i < len(cmd) {
			i++ // closing quote
		}
	} else {
		for i < len(cmd) && cmd[i] != ' ' && cmd[i] != '\t' {
			prog.WriteByte(cmd[i])
			i++
		}
	}
	argv = append(argv, prog.String())
	for {
		for i < len(cmd) && (cmd[i] == ' ' || cmd[i] == '\t') {
			i++
		}
		if i >= len(cmd) {
			return argv
		}
		var arg strings.Builder
		inQuotes := false
		for i < len(cmd) {
			c := cmd[i]
			if !inQuotes && (c == ' ' || c == '\t') {
				break
			}
			if c == '\\' {
				n := 0
				for i < len(cmd) && cmd[i] == '\\' {
					n++
					i++
				}
				if i < len(cmd) && cmd[i] == '"' {
					arg.WriteString(strings.Repeat(`\`, n/2))
					if n%2 == 1 {
						arg.WriteByte('"')
						i++
					}
					// even: the quote is handled by the next iteration
				} else {
					arg.WriteString(strings.Repeat(`\`, n))
				}
				continue
			}
			if c == '"' {
				if inQuotes && i+1 < len(cmd) && cmd[i+1] == '"' {
					arg.WriteByte('"')
					i += 2
					continue
				}
				inQuotes = !inQuotes
				i++
				continue
			}
			arg.WriteByte(c)
			i++
		}
		argv = append(argv, arg.String())
	}
}

// EnvBlock builds the sorted NAME=VALUE list for CreateProcess's
// environment block. Windows compares names case-insensitively, so two
// names differing only in case are refused rather than one silently
// winning.
func EnvBlock(env []driverapi.EnvVar) ([]string, error) {
	seen := map[string]string{}
	out := make([]string, 0, len(env))
	for _, e := range env {
		if err := driverapi.ValidateEnvName(e.Name); err != nil {
			return nil, err
		}
		k := strings.ToUpper(e.Name)
		if prev, ok := seen[k]; ok {
			return nil, &driverapi.InvalidSpecError{Field: "env " + e.Name, Reason: fmt.Sprintf("Windows treats it as the same variable as %q", prev)}
		}
		seen[k] = e.Name
		out = append(out, e.Name+"="+e.Value)
	}
	sortFold(out)
	return out, nil
}

// sortFold sorts case-insensitively, as Windows expects of an environment
// block (insertion sort: environments are small).
func sortFold(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && strings.ToUpper(s[j]) < strings.ToUpper(s[j-1]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
