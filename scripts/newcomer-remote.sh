#!/usr/bin/env bash
# A newcomer's path to a remote sandbox from Python, timed: from a checkout
# (no pip: the client is the standard library only, taken from
# clients/python) to a serve on TCP with TLS and a token, then from Python
# over TCP: run a command, write a file, read it back, and stream a long
# command's output as it comes. Prints each step's wall time and the total.
# Needs: Go, bubblewrap, openssl, python3 (scripts/setup.sh installs them).
# Everything it makes lives in one temporary directory, removed at the end,
# and the serve it starts is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
repo=$(pwd)
tmp=$(mktemp -d)
serve_pid=""
cleanup() {
	if [ -n "$serve_pid" ]; then
		kill -TERM "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

now() { date +%s.%N; }
t0=$(now)
step_start=$t0
step() {
	local t
	t=$(now)
	printf '%-44s %6.2f s\n' "$1" "$(echo "$t - $step_start" | bc)"
	step_start=$t
}

# 1. Build the binaries (a second run reuses Go's build cache).
make build >/dev/null
step "make build"

# 2. A CA and a server certificate for 127.0.0.1, and a token.
cat >"$tmp/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = aleph-sandbox
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,digitalSignature
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
EOF
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=ca \
	-config "$tmp/openssl.cnf" -extensions ca -keyout "$tmp/ca.key" -out "$tmp/ca.pem" 2>/dev/null
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=server \
	-config "$tmp/openssl.cnf" -extensions server -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" \
	-keyout "$tmp/server.key" -out "$tmp/server.pem" 2>/dev/null
token=$(openssl rand -hex 24)
(umask 077 && echo "$token" >"$tmp/tokens")
chmod 600 "$tmp"/*.key
step "certificates and a token"

# 3. serve on TCP (a free port chosen by the kernel, read from its log).
cat >"$tmp/config.toml" <<EOF
[serve]
listen = ["tcp:127.0.0.1:0"]
tokens_file = "$tmp/tokens"
[serve.tls]
cert = "$tmp/server.pem"
key = "$tmp/server.key"
[sandbox.session]
baseline = "agent"   # spawn=True is then not asked about: the shell line below needs it
EOF
XDG_DATA_HOME="$tmp/data" XDG_CONFIG_HOME="$tmp/xdg" ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="$tmp/ws" \
	bin/aleph-sandbox serve --config "$tmp/config.toml" 2>"$tmp/serve.log" &
serve_pid=$!
addr=""
for _ in $(seq 1 200); do
	addr=$(grep -o 'tcp=127\.0\.0\.1:[0-9]*' "$tmp/serve.log" | head -1 | cut -d= -f2 || true)
	[ -n "$addr" ] && break
	kill -0 "$serve_pid" 2>/dev/null || { cat "$tmp/serve.log" >&2; exit 1; }
	sleep 0.05
done
[ -n "$addr" ] || { echo "serve did not listen" >&2; cat "$tmp/serve.log" >&2; exit 1; }
step "serve listening on tcp:$addr"

# 4. Python over TCP: command, file write, read back, a streamed long command.
export ALEPH_SANDBOX_TOKEN="$token"
PYTHONPATH="$repo/clients/python" python3 - "$addr" "$tmp/ca.pem" <<'EOF'
import sys, time
from aleph_sandbox import Client
addr, ca = sys.argv[1], sys.argv[2]
c = Client("tcp:" + addr, ca_file=ca)          # the token from $ALEPH_SANDBOX_TOKEN
t = time.monotonic()
r = c.exec(["/bin/echo", "hello from the sandbox"], session="newcomer")
assert r.exit_code == 0 and r.stdout == b"hello from the sandbox\n", r
print("  exec: %r in %.2f s" % (r.stdout, time.monotonic() - t))
t = time.monotonic()
c.files.write("newcomer", "notes/todo.txt", "ship it\n")
data = c.files.read("newcomer", "notes/todo.txt")
assert data == b"ship it\n", data
print("  files.write + files.read: %r in %.2f s" % (data, time.monotonic() - t))
t = time.monotonic()
arrivals = []
for ev in c.stream(["/bin/sh", "-c", "for i in 1 2 3 4 5; do echo line $i; sleep 0.5; done"], session="newcomer", spawn=True):
    if ev.kind == "stdout":
        arrivals.append(round(time.monotonic() - t, 2))
    elif ev.kind == "exit":
        assert ev.result.exit_code == 0, ev.result
print("  stream: %d chunks, arriving at %s s (the command takes 2.5 s)" % (len(arrivals), arrivals))
assert len(arrivals) >= 3 and arrivals[0] < 1.5, arrivals
EOF
step "Python: exec, write, read, stream"
printf '%-44s %6.2f s\n' "total" "$(echo "$(now) - $t0" | bc)"
