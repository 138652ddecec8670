package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxLineBytes bounds one JSON-RPC message on stdin (8 MiB: a
// run_command with the largest stdin, base64-encoded, fits).
const DefaultMaxLineBytes = 8 << 20

// JSON-RPC 2.0 error codes.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
)

// idPrefix marks the ids this transport puts in place of ids the SDK
// cannot carry exactly (integers beyond int64, fractions): its answer's id
// is mapped back to the client's own, byte for byte.
const idPrefix = "\x00aleph-id-"

// NewStdioTransport is the MCP transport on a byte stream of
// newline-delimited JSON-RPC (stdio): the SDK's, behind a filter that
// answers what the SDK would end the session on, as JSON-RPC says, and
// keeps serving. A line that is not JSON gets a parse error; one that is
// not a single request, notification or response (an array, a batch, a
// missing "jsonrpc", an id that is null, an object or a float, a request
// without a method) gets an invalid-request error; a line longer than
// maxLine bytes is skipped unread past the bound and answered with an
// invalid-request error; a line that is not valid UTF-8 (or holds an
// unpaired surrogate escape, which decoding would turn into U+FFFD) is
// refused, never changed. Ids the SDK would not keep exactly come back
// to the client as it sent them.
func NewStdioTransport(in io.Reader, out io.Writer, maxLine int) mcp.Transport {
	if maxLine <= 0 {
		maxLine = DefaultMaxLineBytes
	}
	pr, pw := io.Pipe()
	w := &lineWriter{out: out, ids: map[string]json.RawMessage{}}
	f := &filter{in: in, pass: pw, w: w, max: maxLine}
	go f.run()
	return &mcp.IOTransport{Reader: pr, Writer: w, MaxLineLength: maxLine + 1}
}

// lineWriter writes whole lines to out, one at a time (the SDK's answers
// and the filter's own), mapping substituted ids back.
type lineWriter struct {
	mu  sync.Mutex
	out io.Writer
	buf []byte
	ids map[string]json.RawMessage
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := w.unmap(w.buf[:i+1])
		if _, err := w.out.Write(line); err != nil {
			w.buf = w.buf[:0]
			return 0, err
		}
		w.buf = w.buf[i+1:]
	}
}

func (w *lineWriter) Close() error { return nil }

// writeLine writes one of the filter's own answers.
func (w *lineWriter) writeLine(b []byte) {
	_, _ = w.Write(append(b, '\n'))
}

// unmap puts back the client's id in an answer to a request whose id was
// substituted.
func (w *lineWriter) unmap(line []byte) []byte {
	if len(w.ids) == 0 || !bytes.Contains(line, []byte(`\u0000aleph-id-`)) {
		return line
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil {
		return line
	}
	var sub string
	if json.Unmarshal(m["id"], &sub) != nil {
		return line
	}
	orig, ok := w.ids[sub]
	if !ok {
		return line
	}
	if _, isReq := m["method"]; isReq {
		return line
	}
	delete(w.ids, sub)
	m["id"] = orig
	b, err := json.Marshal(m)
	if err != nil {
		return line
	}
	return append(b, '\n')
}

func (w *lineWriter) substitute(raw json.RawMessage, n int) string {
	sub := idPrefix + strconv.Itoa(n)
	w.mu.Lock()
	w.ids[sub] = append(json.RawMessage(nil), raw...)
	w.mu.Unlock()
	return sub
}

type filter struct {
	in   io.Reader
	pass *io.PipeWriter
	w    *lineWriter
	max  int
	subs int
}

func (f *filter) run() {
	r := bufio.NewReaderSize(f.in, 64<<10)
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		switch {
		case tooLong:
			// Skipping the rest of an over-long line, unkept.
		case len(line)+len(chunk) > f.max+1:
			tooLong = true
			line = line[:0]
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			f.refuse(nil, rpcInvalidRequest, fmt.Sprintf("message longer than %d bytes: skipped (send smaller messages)", f.max))
			tooLong = false
		} else if len(line) > 0 {
			if fwd, ok := f.check(line); ok {
				if _, werr := f.pass.Write(fwd); werr != nil {
					return
				}
			}
		}
		line = line[:0]
		if err != nil {
			// End of input (or a read error): the SDK sees the end.
			_ = f.pass.CloseWithError(io.EOF)
			return
		}
	}
}

func (f *filter) refuse(id json.RawMessage, code int, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	f.w.writeLine(b)
}

// check returns the line to hand to the SDK, or answers it and returns
// false.
func (f *filter) check(line []byte) ([]byte, bool) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return nil, false
	}
	if !utf8.Valid(trimmed) || hasLoneSurrogate(trimmed) {
		f.refuse(nil, rpcParseError, "the message is not valid UTF-8 text (or holds an unpaired surrogate escape); it was not changed, but refused")
		return nil, false
	}
	if !json.Valid(trimmed) {
		f.refuse(nil, rpcParseError, "parse error: the line is not one JSON value")
		return nil, false
	}
	if trimmed[0] != '{' {
		f.refuse(nil, rpcInvalidRequest, "invalid request: a message is one JSON object (batches are not supported)")
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &m); err != nil {
		f.refuse(nil, rpcInvalidRequest, "invalid request: "+err.Error())
		return nil, false
	}
	rawID, hasID := m["id"]
	idOK, substitute := classifyID(rawID)
	replyID := json.RawMessage(nil)
	if hasID && idOK {
		replyID = rawID
	}
	if v, ok := m["jsonrpc"]; !ok || string(bytes.TrimSpace(v)) != `"2.0"` {
		f.refuse(replyID, rpcInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
		return nil, false
	}
	if hasID && !idOK {
		f.refuse(nil, rpcInvalidRequest, "invalid request: an id is a string or an integer (not null, an object, an array or a fraction)")
		return nil, false
	}
	_, hasMethod := m["method"]
	_, hasResult := m["result"]
	_, hasError := m["error"]
	if !hasMethod && !(hasID && (hasResult || hasError)) {
		f.refuse(replyID, rpcInvalidRequest, `invalid request: "method" is required`)
		return nil, false
	}
	if hasMethod {
		var method string
		if json.Unmarshal(m["method"], &method) != nil {
			f.refuse(replyID, rpcInvalidRequest, `invalid request: "method" must be a string`)
			return nil, false
		}
	}
	if hasID && hasMethod && substitute {
		f.subs++
		sub := f.w.substitute(rawID, f.subs)
		b, _ := json.Marshal(sub)
		m["id"] = b
		out, err := json.Marshal(m)
		if err != nil {
			f.refuse(rawID, rpcInvalidRequest, "invalid request: "+err.Error())
			return nil, false
		}
		return append(out, '\n'), true
	}
	return append(append([]byte(nil), trimmed...), '\n'), true
}

// classifyID says whether raw is an id JSON-RPC allows here (a string or
// an integer) and whether the SDK would not carry it exactly (an integer
// beyond int64).
func classifyID(raw json.RawMessage) (ok, substitute bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false, false
	}
	switch raw[0] {
	case '"':
		return true, false
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if bytes.ContainsAny(raw, ".eE") {
			return false, false
		}
		if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
			return true, true
		}
		return true, false
	}
	return false, false
}

// hasLoneSurrogate reports a \uD800-\uDFFF escape that is not a high one
// followed by a low one: decoding turns it into U+FFFD silently.
func hasLoneSurrogate(b []byte) bool {
	for i := 0; i+5 < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] != 'u' {
			i++ // an escaped character: skip it
			continue
		}
		v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 32)
		if err != nil {
			continue
		}
		switch {
		case v >= 0xD800 && v <= 0xDBFF:
			if i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, err := strconv.ParseUint(string(b[i+8:i+12]), 16, 32); err == nil && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
					continue
				}
			}
			return true
		case v >= 0xDC00 && v <= 0xDFFF:
			return true
		}
		i += 5
	}
	return false
}
