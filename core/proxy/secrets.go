package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// PlaceholderPrefix starts the value a child sees in place of a secret: a
// secret NAME reaches the child as "aleph:secret:NAME".
const PlaceholderPrefix = "aleph:secret:"

// Placeholder returns the stand-in the child sees for secret name.
func Placeholder(name string) string { return PlaceholderPrefix + name }

// SecretInjection makes the proxy set Header to Format with "{secret}"
// replaced by the value of Secret, on plain HTTP requests forwarded to a
// target matching Host (an allowlist-style pattern: exact name, "*.suffix"
// or IP literal, optional ":port"). The value replaces anything the child
// sent in that header.
type SecretInjection struct {
	Host   string `json:"host" koanf:"host"`
	Header string `json:"header" koanf:"header"`
	Secret string `json:"secret" koanf:"secret"`
	// Format defaults to "{secret}".
	Format string `json:"format" koanf:"format"`
}

// SecretError says why secrets or injection rules were refused. It never
// holds a secret value.
type SecretError struct {
	Secret string
	Reason string
}

func (e *SecretError) Error() string {
	if e.Secret == "" {
		return "secret injection: " + e.Reason
	}
	return fmt.Sprintf("secret %q: %s", e.Secret, e.Reason)
}

// Headers a rule may not set: framing, routing and hop-by-hop headers, whose
// rewriting would change how the request is delimited or where it goes.
var forbiddenInjectHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authorization": true, "Te": true,
	"Trailer": true, "Upgrade": true, "Expect": true,
}

// compiledInjection is a validated rule with its host pattern parsed.
type compiledInjection struct {
	rule   Rule
	header string
	secret string
	format string
}

// validSecretName: an environment variable name, so the placeholder can be
// delivered in the child's environment.
func validSecretName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// validHeaderValue refuses any control character except horizontal tab:
// CR, LF and NUL would split or truncate the request upstream.
func validHeaderValue(v string) bool {
	return httpguts.ValidHeaderFieldValue(v) && !strings.ContainsAny(v, "\r\n\x00")
}

// CheckInjection checks one rule on its own, as every command would:
// the host pattern, the header name (a valid name, and not one the proxy
// never injects, such as Host), the format. field is the rule's key at
// fault ("host", "header" or "format"). A configuration is checked with it
// when it is loaded, so a rule that would fail every command is refused
// once, by name, instead.
func CheckInjection(in SecretInjection) (field string, err error) {
	_, field, err = checkInjection(in)
	return field, err
}

func checkInjection(in SecretInjection) (compiledInjection, string, error) {
	r, err := ParseRule(in.Host)
	if err != nil {
		return compiledInjection{}, "host", err
	}
	if !httpguts.ValidHeaderFieldName(in.Header) {
		return compiledInjection{}, "header", fmt.Errorf("%q is not a valid header name", in.Header)
	}
	h := http.CanonicalHeaderKey(in.Header)
	if forbiddenInjectHeaders[h] {
		return compiledInjection{}, "header", fmt.Errorf("%q may not be injected (it frames or routes the request, which the proxy owns)", h)
	}
	format := in.Format
	if format == "" {
		format = "{secret}"
	}
	if !strings.Contains(format, "{secret}") {
		return compiledInjection{}, "format", errors.New("must contain {secret}")
	}
	if !validHeaderValue(strings.ReplaceAll(format, "{secret}", "")) {
		return compiledInjection{}, "format", errors.New("contains control characters")
	}
	return compiledInjection{rule: r, header: h, secret: in.Secret, format: format}, "", nil
}

// compileInjections validates rules against the command's secrets. When
// secrets is non-empty every rule must name one of them (a rule that could
// never fire would silently strand the secret); rules naming absent secrets
// are dropped when no secrets are given.
func compileInjections(rules []SecretInjection, secrets map[string]string) ([]compiledInjection, error) {
	for name, v := range secrets {
		if !validSecretName(name) {
			return nil, &SecretError{Secret: name, Reason: "name must be letters, digits and '_', not starting with a digit"}
		}
		if !validHeaderValue(v) {
			return nil, &SecretError{Secret: name, Reason: "value contains control characters (CR, LF, NUL or others) and cannot be sent in a header"}
		}
	}
	var out []compiledInjection
	for _, in := range rules {
		c, field, err := checkInjection(in)
		if err != nil {
			return nil, &SecretError{Secret: in.Secret, Reason: field + ": " + err.Error()}
		}
		if _, ok := secrets[in.Secret]; !ok {
			if len(secrets) > 0 {
				return nil, &SecretError{Secret: in.Secret, Reason: "an injection rule names this secret but the command does not provide it"}
			}
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// matches reports whether the injection applies to target t.
func (c compiledInjection) matches(t Target) bool {
	if !c.rule.portMatches(t.Port) {
		return false
	}
	if c.rule.Kind == RuleIP {
		return t.IP.IsValid() && t.IP == c.rule.IP
	}
	return !t.IP.IsValid() && c.rule.nameMatches(t.Host)
}

// placeholderEnv returns NAME=aleph:secret:NAME for each secret, sorted.
func placeholderEnv(secrets map[string]string) [][2]string {
	names := make([]string, 0, len(secrets))
	for n := range secrets {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([][2]string, 0, len(names))
	for _, n := range names {
		out = append(out, [2]string{n, Placeholder(n)})
	}
	return out
}
