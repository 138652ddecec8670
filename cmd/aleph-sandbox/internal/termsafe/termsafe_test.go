package termsafe

import (
	"bytes"
	"errors"
	"regexp"
	"testing"
	"unicode/utf8"
)

func filterAll(t testing.TB, chunks ...[]byte) string {
	t.Helper()
	var out bytes.Buffer
	w := NewWriter(&out)
	for _, c := range chunks {
		n, err := w.Write(c)
		if err != nil || n != len(c) {
			t.Fatalf("Write: %d, %v (want %d)", n, err, len(c))
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestFilter(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		// Kept as they are.
		{"plain text", "hello, world\n", "hello, world\n"},
		{"tab, newline, carriage return", "a\tb\r\nc", "a\tb\r\nc"},
		{"utf-8", "héllo wörld ✓ 日本 🙂\n", "héllo wörld ✓ 日本 🙂\n"},
		{"sgr colour", "\x1b[31mred\x1b[0m", "\x1b[31mred\x1b[0m"},
		{"sgr reset without parameters", "\x1b[m", "\x1b[m"},
		{"sgr 256 colours", "\x1b[38;5;208mx\x1b[1;4;38;2;1;2;3m", "\x1b[38;5;208mx\x1b[1;4;38;2;1;2;3m"},
		{"literal backslash", `C:\x1b`, `C:\x1b`},
		// Neutralised.
		{"osc 52 clipboard write", "\x1b]52;c;ZWNobyBwd25lZA==\x07", `\x1b]52;c;ZWNobyBwd25lZA==\x07`},
		{"osc 52 with st", "\x1b]52;c;QQ==\x1b\\", `\x1b]52;c;QQ==\x1b\`},
		{"window title", "\x1b]0;owned\x07", `\x1b]0;owned\x07`},
		{"dcs", "\x1bP+q544e\x1b\\", `\x1bP+q544e\x1b\`},
		{"csi cursor move", "\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"csi private mode", "\x1b[?1049h", `\x1b[?1049h`},
		{"sgr with colon subparameters", "\x1b[4:3m", `\x1b[4:3m`},
		{"csi with intermediate", "\x1b[0 q", `\x1b[0 q`},
		{"bare esc", "a\x1bb", `a\x1bb`},
		{"esc at the end", "a\x1b", `a\x1b`},
		{"unfinished sgr at the end", "\x1b[31", `\x1b[31`},
		{"bell, backspace, del, nul", "\x07\x08\x7f\x00", `\x07\x08\x7f\x00`},
		{"c1 csi as utf-8", "\u009b2J", `\u009b2J`},
		{"c1 osc and st as utf-8", "\u009d0;t\u009c", `\u009d0;t\u009c`},
		{"nel as utf-8", "a\u0085b", `a\u0085b`},
		{"raw 8-bit c1 byte", "\x9b2J", `\x9b2J`},
		{"invalid utf-8", "\xff\xfe", `\xff\xfe`},
		{"truncated utf-8 at the end", "ok\xe2\x9c", `ok\xe2\x9c`},
		{"overlong sgr", "\x1b[" + string(bytes.Repeat([]byte("1;"), 40)) + "m", `\x1b[` + string(bytes.Repeat([]byte("1;"), 40)) + "m"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := filterAll(t, []byte(c.in)); got != c.want {
				t.Fatalf("filter(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// A sequence or a character split across writes is judged whole: at every
// split point of every sample, two writes give what one write gives.
func TestSplitAcrossWrites(t *testing.T) {
	samples := []string{
		"\x1b[31mred\x1b[0m plain",
		"\x1b]52;c;QQ==\x07after",
		"日本🙂\u009b",
		"a\x1b[38;5;208mb",
		"x\x1b",
	}
	for _, s := range samples {
		whole := filterAll(t, []byte(s))
		for i := 0; i <= len(s); i++ {
			for j := i; j <= len(s); j++ {
				if got := filterAll(t, []byte(s[:i]), []byte(s[i:j]), []byte(s[j:])); got != whole {
					t.Fatalf("%q split at %d,%d: %q, whole: %q", s, i, j, got, whole)
				}
			}
		}
	}
	// One byte at a time: the colour survives, the clipboard write does not.
	in := []byte("\x1b[32mok\x1b[0m\x1b]52;c;QQ==\x07")
	var chunks [][]byte
	for i := range in {
		chunks = append(chunks, in[i:i+1])
	}
	if got, want := filterAll(t, chunks...), "\x1b[32mok\x1b[0m"+`\x1b]52;c;QQ==\x07`; got != want {
		t.Fatalf("byte by byte: %q, want %q", got, want)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestWriteError(t *testing.T) {
	want := errors.New("broken pipe")
	w := NewWriter(failWriter{want})
	if _, err := w.Write([]byte("x")); !errors.Is(err, want) {
		t.Fatalf("Write: %v, want the underlying error", err)
	}
	// Held back bytes are written (and fail) at Flush.
	w = NewWriter(failWriter{want})
	if _, err := w.Write([]byte("\x1b")); err != nil {
		t.Fatalf("a lone ESC is held, not written: %v", err)
	}
	if err := w.Flush(); !errors.Is(err, want) {
		t.Fatalf("Flush: %v", err)
	}
}

// safe is what may reach a terminal: no ESC except in a plain SGR, no C0
// control except \t \n \r, no DEL, valid UTF-8 without C1 controls.
var plainSGR = regexp.MustCompile(`\x1b\[[0-9;]*m`)

func checkSafe(t *testing.T, in []byte, out string) {
	t.Helper()
	rest := plainSGR.ReplaceAllString(out, "")
	if !utf8.ValidString(rest) {
		t.Fatalf("%q: output is not valid UTF-8: %q", in, out)
	}
	for _, r := range rest {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
			t.Fatalf("%q: control %U reaches the terminal: %q", in, r, out)
		}
	}
}

func FuzzWriter(f *testing.F) {
	for _, s := range []string{"\x1b[31mx\x1b[0m", "\x1b]52;c;QQ==\x07", "\u009b2J", "\xff", "\x1bP1$r\x1b\\", "a\tb\r\n"} {
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		whole := filterAll(t, in)
		checkSafe(t, in, whole)
		// Split invariance.
		k := int(split) % (len(in) + 1)
		if got := filterAll(t, in[:k], in[k:]); got != whole {
			t.Fatalf("%q split at %d: %q, whole %q", in, k, got, whole)
		}
		// Safe text is left alone.
		if utf8.Valid(in) && !bytes.ContainsFunc(in, func(r rune) bool {
			return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f || r >= 0x80 && r <= 0x9f
		}) && whole != string(in) {
			t.Fatalf("safe input %q changed to %q", in, whole)
		}
	})
}
