#!/usr/bin/env bash
# Installs the system packages aleph-sandbox and its tests use (Debian/Ubuntu).
set -euo pipefail
# openssl: the client tests make their TLS certificates with it.
pkgs="bubblewrap protobuf-compiler iproute2 curl openssl"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq $pkgs >/dev/null
# The TypeScript client's tests need Node >= 18 and npm (its pinned
# compiler comes from the lockfile: `make test-typescript` runs npm ci).
if ! command -v npm >/dev/null; then
	$sudo apt-get install -y -qq nodejs npm >/dev/null
fi
node -e 'if (+process.versions.node.split(".")[0] < 18) { console.error("Node >= 18 is needed, found " + process.version); process.exit(1) }'
# The module graph's go.mod files: docs/embedding.md's program is built by a
# test as a module of its own, offline (GOPROXY=off), and resolving its build
# list reads go.mod files that building the checkout itself never fetches.
if command -v go >/dev/null; then
	(cd "$(dirname "$0")/.." && go list -m all >/dev/null)
fi
