package service

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestLoadTokens(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the tokens file's mode is checked on POSIX systems")
	}
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "# comment\n\nAAAAAAAAAAAAAAAA1\n  BBBBBBBBBBBBBBBB2  \n", 0o600)
	tk, err := LoadTokens(good)
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]bool{"AAAAAAAAAAAAAAAA1": true, "BBBBBBBBBBBBBBBB2": true, "AAAAAAAAAAAAAAAA": false, "AAAAAAAAAAAAAAAA12": false, "": false, "# comment": false} {
		if got := tk.Valid(tok); got != want {
			t.Errorf("Valid(%q) = %v, want %v", tok, got, want)
		}
	}
	for name, c := range map[string]struct {
		text string
		mode os.FileMode
		want string
	}{
		"group-readable": {"AAAAAAAAAAAAAAAA1\n", 0o640, "mode 0640"},
		"world-writable": {"AAAAAAAAAAAAAAAA1\n", 0o602, "mode 0602"},
		"empty":          {"# nothing\n", 0o600, "holds no token"},
		"short":          {"short\n", 0o600, "at least 16"},
	} {
		_, err := LoadTokens(write(name, c.text, c.mode))
		var te *TokenFileError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a TokenFileError saying %q", name, err, c.want)
		}
	}
	if _, err := LoadTokens(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestRequireToken(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t")
	if err := os.WriteFile(p, []byte("CCCCCCCCCCCCCCCC3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tk, err := LoadTokens(p)
	if err != nil {
		t.Skipf("tokens file: %v", err)
	}
	reached := 0
	h := RequireToken(tk, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached++ }))
	for auth, want := range map[string]int{"": 401, "Bearer nope-nope-nope-nope": 401, "Basic CCCCCCCCCCCCCCCC3": 401, "Bearer CCCCCCCCCCCCCCCC3": 200} {
		r := httptest.NewRequest("POST", "/aleph.host.v1.Service/CheckPolicy", strings.NewReader("{}"))
		r.Header.Set("Content-Type", "application/json")
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		before := reached
		h.ServeHTTP(w, r)
		if w.Code != want || (want == 200) != (reached == before+1) {
			t.Errorf("%q: status %d (handler reached %v), want %d", auth, w.Code, reached > before, want)
		}
		if want == 401 && !strings.Contains(w.Body.String(), "unauthenticated") {
			t.Errorf("%q: body %q", auth, w.Body.String())
		}
	}
}
