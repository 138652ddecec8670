#!/usr/bin/env bash
# Installs what `make test-fleet` needs beside scripts/setup.sh's packages
# (Debian/Ubuntu): podman with runc (crun refuses hosts with hybrid
# cgroups), HAProxy as the router, a static busybox as the image's
# userland. The tests use a private podman configuration and storage
# (contrib/fleet/podman-env.sh): nothing of the machine's is changed.
set -euo pipefail
pkgs="podman runc haproxy busybox-static"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq $pkgs >/dev/null
# contrib/fleet is a module of its own (the Kubernetes and agent-sandbox
# types): fetch its modules now, so the tests fetch nothing.
if command -v go >/dev/null; then
	(cd "$(dirname "$0")/../contrib/fleet" && go mod download)
fi
