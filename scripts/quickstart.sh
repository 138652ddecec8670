#!/usr/bin/env bash
# Fresh machine to first sandboxed command: install bubblewrap, build every
# binary into bin/, and run a command on the default driver.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
./scripts/setup.sh
make build
cmd='echo hello from the sandbox; read line < /etc/shadow || echo "and /etc/shadow is not here"'
echo "+ bin/aleph-sandbox exec -- /bin/sh -c '$cmd'"
bin/aleph-sandbox exec -- /bin/sh -c "$cmd"
