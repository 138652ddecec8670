// Package termsafe makes a sandboxed program's output safe to show on a
// terminal. A terminal acts on the control sequences it is sent: OSC 52
// writes the user's clipboard, OSC 0/2 sets the window title, DCS reaches
// terminal-specific handlers, CSI moves the cursor and rewrites what is
// already on the screen. A sandboxed command must not be able to do any of
// that to the terminal of the person running it.
//
// Writer passes through printable text, valid UTF-8, \t, \n, \r and the
// plain SGR colour sequences (ESC [ digits-and-semicolons m), and shows
// everything else visibly escaped: ESC as `\x1b`, other C0 controls and DEL
// as `\xNN`, C1 controls (U+0080..U+009F) as `\u00NN`, bytes that are not
// UTF-8 as `\xNN`. Once its ESC is shown as text no sequence can start, so
// the bytes after it are ordinary text. The filter is a streaming state
// machine: a sequence or a UTF-8 character split across writes is judged
// as a whole.
package termsafe

import (
	"io"
	"unicode/utf8"
)

// maxSGR bounds how many bytes of a would-be SGR sequence are held while
// waiting for its final 'm': real colour sequences are a few dozen bytes at
// most; anything longer is shown escaped.
const maxSGR = 64

const esc = 0x1b

// Writer filters what is written to it and writes the result to the
// underlying writer. It is not safe for concurrent use. Call Flush when the
// stream ends, so bytes held back (an unfinished sequence or UTF-8
// character) are written, escaped.
type Writer struct {
	w    io.Writer
	pend []byte // undecided tail: an ESC-led SGR candidate or a partial UTF-8 character
	out  []byte // scratch for one Write's output
}

// NewWriter returns a Writer that writes the neutralised form of its input
// to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write filters p. It reports len(p) when the filtered bytes were written,
// and the underlying writer's error otherwise.
func (f *Writer) Write(p []byte) (int, error) {
	buf := p
	if len(f.pend) > 0 {
		buf = append(f.pend, p...)
		f.pend = nil
	}
	f.out = f.out[:0]
	rest := f.filter(buf, false)
	if len(rest) > 0 {
		f.pend = append([]byte(nil), rest...)
	}
	if err := f.emit(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes, escaped, whatever is held back waiting for more input.
func (f *Writer) Flush() error {
	if len(f.pend) == 0 {
		return nil
	}
	buf := f.pend
	f.pend = nil
	f.out = f.out[:0]
	f.filter(buf, true)
	return f.emit()
}

func (f *Writer) emit() error {
	if len(f.out) == 0 {
		return nil
	}
	_, err := f.w.Write(f.out)
	f.out = f.out[:0]
	return err
}

// filter appends the neutralised form of buf to f.out and returns the tail
// it cannot judge yet (always empty when final).
func (f *Writer) filter(buf []byte, final bool) []byte {
	i := 0
	for i < len(buf) {
		b := buf[i]
		switch {
		case b == esc:
			n, undecided := sgrLen(buf[i:])
			if undecided && !final {
				return buf[i:]
			}
			if n > 0 {
				f.out = append(f.out, buf[i:i+n]...)
				i += n
				continue
			}
			f.out = appendHex(f.out, b)
			i++
		case b == '\t' || b == '\n' || b == '\r':
			f.out = append(f.out, b)
			i++
		case b < 0x20 || b == 0x7f:
			f.out = appendHex(f.out, b)
			i++
		case b < utf8.RuneSelf:
			f.out = append(f.out, b)
			i++
		default:
			if !final && !utf8.FullRune(buf[i:]) {
				return buf[i:]
			}
			r, size := utf8.DecodeRune(buf[i:])
			switch {
			case r == utf8.RuneError && size <= 1:
				f.out = appendHex(f.out, b)
				i++
				continue
			case r >= 0x80 && r <= 0x9f:
				f.out = append(f.out, '\\', 'u', '0', '0', hexDigit(byte(r)>>4), hexDigit(byte(r)&0xf))
			default:
				f.out = append(f.out, buf[i:i+size]...)
			}
			i += size
		}
	}
	return nil
}

// sgrLen looks at s, which starts with ESC: n is the length of the plain
// SGR sequence it starts with (0: it does not start one); undecided means
// s ends before that can be told.
func sgrLen(s []byte) (n int, undecided bool) {
	if len(s) < 2 {
		return 0, true
	}
	if s[1] != '[' {
		return 0, false
	}
	for j := 2; j < len(s) && j < maxSGR; j++ {
		switch c := s[j]; {
		case c == 'm':
			return j + 1, false
		case c >= '0' && c <= '9' || c == ';':
		default:
			return 0, false
		}
	}
	if len(s) >= maxSGR {
		return 0, false
	}
	return 0, true
}

func appendHex(out []byte, b byte) []byte {
	return append(out, '\\', 'x', hexDigit(b>>4), hexDigit(b&0xf))
}

func hexDigit(n byte) byte {
	return "0123456789abcdef"[n&0xf]
}
