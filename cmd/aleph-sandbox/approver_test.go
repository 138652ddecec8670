package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// blockingReader never answers until closed (a user who does not type).
type blockingReader struct{ closed chan struct{} }

func (b *blockingReader) Read([]byte) (int, error) { <-b.closed; return 0, io.EOF }
func (b *blockingReader) Close() error             { close(b.closed); return nil }

// TestApproverTerminal: on a terminal the question is asked once, with the
// request's summary; y or yes (any case) approves, anything else, an empty
// line or end of input denies, silence until the deadline is a timeout;
// without a terminal, or when the terminal cannot be opened, the answer is
// no without asking; --yes approves without asking.
func TestApproverTerminal(t *testing.T) {
	req := driverapi.ApprovalRequest{SessionID: "s", Program: "/bin/sh", Args: []string{"-c", "curl x | sh", "\x1b[2Jfake"}, Summary: "network all for session s"}
	text := func(s string) func() (io.ReadCloser, error) {
		return func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(s)), nil }
	}
	cases := []struct {
		name     string
		a        approver
		want     driverapi.ApprovalOutcome
		asked    bool
		deadline time.Duration
	}{
		{"y", approver{terminal: true, answers: text("y\n")}, driverapi.ApprovalApproved, true, 0},
		{"YES", approver{terminal: true, answers: text("  YES \n")}, driverapi.ApprovalApproved, true, 0},
		{"n", approver{terminal: true, answers: text("n\n")}, driverapi.ApprovalDenied, true, 0},
		{"empty line", approver{terminal: true, answers: text("\n")}, driverapi.ApprovalDenied, true, 0},
		{"yesterday", approver{terminal: true, answers: text("yesterday\n")}, driverapi.ApprovalDenied, true, 0},
		{"end of input", approver{terminal: true, answers: text("")}, driverapi.ApprovalDenied, true, 0},
		{"silence", approver{terminal: true, answers: func() (io.ReadCloser, error) {
			return &blockingReader{closed: make(chan struct{})}, nil
		}}, driverapi.ApprovalTimeout, true, 50 * time.Millisecond},
		{"no terminal", approver{terminal: false, answers: text("y\n")}, driverapi.ApprovalDenied, false, 0},
		{"terminal cannot be opened", approver{terminal: true, answers: func() (io.ReadCloser, error) {
			return nil, errors.New("no tty")
		}}, driverapi.ApprovalDenied, false, 0},
		{"--yes", approver{yes: true, terminal: false}, driverapi.ApprovalApproved, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var prompt bytes.Buffer
			tc.a.prompt = &prompt
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			got, err := tc.a.RequestApproval(ctx, req)
			if err != nil || got != tc.want {
				t.Fatalf("outcome %v, %v; want %v", got, err, tc.want)
			}
			// The command line, words quoted where needed and the escape
			// sequence shown, not sent; then the question.
			want := "aleph-sandbox: session s runs: /bin/sh -c \"curl x | sh\" \"\\x1b[2Jfake\"\n" +
				"aleph-sandbox: network all for session s (a yes is kept as a grant of the session): allow? [y/N] "
			asked := strings.Contains(prompt.String(), want)
			if asked != tc.asked || strings.Count(prompt.String(), "allow?") > 1 || strings.Contains(prompt.String(), "\x1b") {
				t.Fatalf("prompt %q, want asked=%v once (%q)", prompt.String(), tc.asked, want)
			}
		})
	}
}

// TestApproverPromptShowsInvisibles: characters that print nothing, or
// reorder or fake what is around them (bidi overrides and isolates,
// zero-width characters, the line and paragraph separators, a no-break
// space that looks like a word break), are shown as escapes in the command
// line and in the summary, so an argument or a granted path cannot make the
// prompt read as another command; a plain word and an accented one are
// shown as they are (the control). A command line cut at its bound is cut
// between characters.
func TestApproverPromptShowsInvisibles(t *testing.T) {
	invisible := []rune{'\u202e', '\u2066', '\u2069', '\u200b', '\u2028', '\u2029', '\u00a0', '\ufeff', '\u061c'}
	var args []string
	for _, r := range invisible {
		args = append(args, "x"+string(r)+"y")
	}
	args = append(args, "plain", "caf\u00e9")
	req := driverapi.ApprovalRequest{SessionID: "s\u202e", Program: "/bin/echo", Args: args,
		Summary: "this command asks for read access to /tmp/\u202edata\u2069"}
	var prompt bytes.Buffer
	a := approver{terminal: true, prompt: &prompt, answers: func() (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader("n\n")), nil
	}}
	if got, err := a.RequestApproval(context.Background(), req); err != nil || got != driverapi.ApprovalDenied {
		t.Fatalf("outcome %v, %v", got, err)
	}
	p := prompt.String()
	for _, r := range invisible {
		if strings.ContainsRune(p, r) {
			t.Errorf("the prompt holds U+%04X raw: %q", r, p)
		}
		if esc := fmt.Sprintf(`\u%04x`, r); !strings.Contains(p, esc) {
			t.Errorf("the prompt does not show U+%04X as %s: %q", r, esc, p)
		}
	}
	if !strings.Contains(p, " plain caf\u00e9\n") || !strings.Contains(p, `/tmp/\u202edata\u2069`) {
		t.Errorf("printable words or the path not shown as they are: %q", p)
	}
	long := commandLine("/bin/cat", []string{strings.Repeat("\u00e9", maxShownCommand)})
	if !utf8.ValidString(long) || !strings.HasSuffix(long, "...") {
		t.Errorf("a long command line is cut inside a character: %q", long[len(long)-8:])
	}
}
