package appcontainer

import (
	"errors"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func TestQuoteArgTable(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain", "plain"},
		{"", `""`},
		{"a b", `"a b"`},
		{"tab\there", "\"tab\there\""},
		{`a"b`, `"a\"b"`},
		{`"`, `"\""`},
		{`\`, `\`},
		{`a\`, `a\`},
		{`a b\`, `"a b\\"`},
		{`a\\b`, `a\\b`},
		{`a\"b`, `"a\\\"b"`},
		{`C:\Program Files\`, `"C:\Program Files\\"`},
		{`\\server\share\`, `\\server\share\`},
		{`\\"`, `"\\\\\""`},
		{"new\nline", "\"new\nline\""},
	}
	for _, c := range cases {
		if got := QuoteArg(c.in); got != c.want {
			t.Errorf("QuoteArg(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// nastyArgs are arguments that broke real quoting code.
var nastyArgs = []string{
	"", " ", "\t", "a b", `"`, `""`, `"""`, `\`, `\\`, `\"`, `\\"`, `a\`, `a\\`, `a\\\`,
	`a b\`, `a b\\`, `"a b"`, `\"a b\"`, `C:\Program Files\`, `C:\Program Files\x`,
	`\\server\share\dir\`, `&|<>^%`, `%PATH%`, `!x!`, "uni✓code", `x"y z"w`, `--opt="v a l"`,
	"trailing space ", " leading", "mid\"\\\"quote", `\\\\"\\`, "line\nbreak", "v\vtab",
	`" & calc.exe & "`, `\" & calc & \"`,
}

func TestCommandLineRoundTrip(t *testing.T) {
	prog := `C:\Program Files\Tool Dir\tool.exe`
	for _, a := range nastyArgs {
		cl, err := CommandLine(prog, []string{a})
		if err != nil {
			t.Fatal(err)
		}
		got := SplitCommandLine(cl)
		if len(got) != 2 || got[0] != prog || got[1] != a {
			t.Errorf("arg %q: command line %q parsed back as %q", a, cl, got)
		}
	}
	// All at once, so no argument bleeds into its neighbour.
	cl, err := CommandLine(prog, nastyArgs)
	if err != nil {
		t.Fatal(err)
	}
	got := SplitCommandLine(cl)
	if strings.Join(got[1:], "\x00") != strings.Join(nastyArgs, "\x00") || got[0] != prog {
		t.Errorf("all args: %q\nparsed back as %q", cl, got)
	}
}

// TestSplitCommandLineRules pins the parser to documented
// CommandLineToArgvW examples, so the round trip is not a parser agreeing
// with its own mistakes.
func TestSplitCommandLineRules(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{`p "a b c" d e`, []string{"p", "a b c", "d", "e"}},
		{`p "ab\"c" "\\" d`, []string{"p", `ab"c`, `\`, "d"}},
		{`p a\\\b d"e f"g h`, []string{"p", `a\\\b`, "de fg", "h"}},
		{`p a\\\"b c d`, []string{"p", `a\"b`, "c", "d"}},
		{`p a\\\\"b c" d e`, []string{"p", `a\\b c`, "d", "e"}},
		{`p "a""b"`, []string{"p", `a"b`}},
		{`"C:\dir with space\p.exe" x`, []string{`C:\dir with space\p.exe`, "x"}},
		{`C:\dir\p\"x y`, []string{`C:\dir\p\"x`, "y"}},
		{"p\t\tx  ", []string{"p", "x"}},
		{`p ""`, []string{"p", ""}},
	}
	for _, c := range cases {
		got := SplitCommandLine(c.in)
		if strings.Join(got, "\x00") != strings.Join(c.want, "\x00") {
			t.Errorf("SplitCommandLine(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCommandLineRefuses(t *testing.T) {
	var ise *driverapi.InvalidSpecError
	if _, err := CommandLine(`C:\a"b.exe`, nil); !errors.As(err, &ise) {
		t.Errorf("quote in program: %v", err)
	}
	if _, err := CommandLine(`C:\p.exe`, []string{strings.Repeat("x", 33000)}); !errors.As(err, &ise) {
		t.Errorf("over-long command line: %v", err)
	}
	if _, err := CommandLine(`C:\p.exe`, []string{strings.Repeat("x", 30000)}); err != nil {
		t.Errorf("control: %v", err)
	}
}

func TestEnvBlock(t *testing.T) {
	got, err := EnvBlock([]driverapi.EnvVar{{Name: "b", Value: "2"}, {Name: "A", Value: "1=1"}, {Name: "SystemRoot", Value: `C:\Windows`}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ";") != `A=1=1;b=2;SystemRoot=C:\Windows` {
		t.Errorf("env block %q", got)
	}
	var ise *driverapi.InvalidSpecError
	if _, err := EnvBlock([]driverapi.EnvVar{{Name: "Path", Value: "1"}, {Name: "PATH", Value: "2"}}); !errors.As(err, &ise) {
		t.Errorf("case-duplicate names accepted: %v", err)
	}
}

func BenchmarkCommandLine(b *testing.B) {
	for b.Loop() {
		if _, err := CommandLine(`C:\Program Files\tool.exe`, nastyArgs); err != nil {
			b.Fatal(err)
		}
	}
}
