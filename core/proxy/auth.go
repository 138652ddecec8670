package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/textproto"
	"net/url"
	"strings"
)

// The host-loopback listener (RouteHostLoopback) is reachable by every
// process on the host, including other sandboxed commands allowed onto
// host loopback. Without a credential any of them could use this command's
// allowlist and, worse, have this command's secrets injected into its own
// requests. So that listener serves only clients that present the proxy's
// credential, which exists nowhere but in this proxy and in the proxy
// variables of its own command. On that route the unix socket wants the
// credential too: the child does not use it, and its 0700 directory keeps
// out other users but not other sandboxes of the same user that can read
// it (on macOS, Seatbelt lets them read /private/tmp). On the bridge route
// the socket needs none: it is the only listener, and the Linux driver
// hands it to this command's sandbox alone.

// credentialUser is the fixed user name of the credential. The token alone
// carries the secret; a fixed name keeps the URLs predictable for people
// reading a child's environment.
const credentialUser = "aleph"

// credentialBytes is the token's entropy: 256 bits from crypto/rand.
const credentialBytes = 32

// proxyAuthRealm is the realm named in 407 answers.
const proxyAuthRealm = "aleph-sandbox proxy"

// credential is one proxy's user name and token. It never goes into a
// Decision, an error or a log line; Format redacts it so a stray %v
// cannot put it there either.
type credential struct {
	user  string
	token string
}

func newCredential() (*credential, error) {
	var b [credentialBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("proxy: generating the loopback credential: %w", err)
	}
	// Hex needs no escaping in a URL's user information, so every client
	// reads the token back exactly.
	return &credential{user: credentialUser, token: hex.EncodeToString(b[:])}, nil
}

// Format redacts the credential under every verb (a Stringer alone would
// not cover %d or %#v).
func (credential) Format(f fmt.State, _ rune) { io.WriteString(f, "proxy credential (redacted)") }

func (c *credential) userinfo() *url.Userinfo { return url.UserPassword(c.user, c.token) }

// matches compares both parts in constant time, so the time a refusal takes
// says nothing about how much of a guess was right.
func (c *credential) matches(user, pass []byte) bool {
	u := subtle.ConstantTimeCompare(user, []byte(c.user))
	p := subtle.ConstantTimeCompare(pass, []byte(c.token))
	return u&p == 1
}

// checkProxyAuthorization vets the Proxy-Authorization header values of
// one request. The denial's detail never quotes what the client sent: it
// may be another proxy's token.
func (c *credential) checkProxyAuthorization(values []string) *denial {
	switch len(values) {
	case 0:
		return &denial{code: ReasonProxyAuthRequired, detail: "no proxy credential (Proxy-Authorization) was sent; use the proxy URL from the command's proxy variables, which carries it"}
	case 1:
	default:
		return &denial{code: ReasonProxyAuthFailed, detail: "more than one Proxy-Authorization header"}
	}
	scheme, rest, _ := strings.Cut(textproto.TrimString(values[0]), " ")
	if !strings.EqualFold(scheme, "Basic") {
		return &denial{code: ReasonProxyAuthFailed, detail: "the proxy credential must use the Basic scheme"}
	}
	raw, err := base64.StdEncoding.DecodeString(textproto.TrimString(rest))
	if err != nil {
		return &denial{code: ReasonProxyAuthFailed, detail: "the Basic proxy credential is not valid base64"}
	}
	user, pass, ok := bytes.Cut(raw, []byte(":"))
	if !ok || !c.matches(user, pass) {
		return &denial{code: ReasonProxyAuthFailed, detail: "the proxy credential does not match this command's proxy"}
	}
	return nil
}

// proxyAuthenticate is the challenge sent with every 407.
var proxyAuthenticate = fmt.Sprintf("Proxy-Authenticate: Basic realm=%q\r\n", proxyAuthRealm)
