#!/usr/bin/env bash
# Prepares the build context of contrib/container/Containerfile in DIR: the
# static aleph-sandbox binaries of BIN (make build), bubblewrap and the
# shared libraries it loads (read from ldd, copied from this machine), a
# static busybox as the userland sandboxed commands run (sh, cat, ls, ...),
# and the few files of /etc serve reads. The image is then FROM scratch:
# nothing is pulled from a registry, everything comes from this machine.
#
#   contrib/container/prepare-context.sh BIN DIR
#   podman build -f contrib/container/Containerfile -t aleph-sandbox:dev DIR
set -euo pipefail
bin=${1:?usage: prepare-context.sh BIN DIR}
dir=${2:?usage: prepare-context.sh BIN DIR}
here=$(cd "$(dirname "$0")" && pwd)
bwrap=$(command -v bwrap) || { echo "prepare-context: bwrap is not installed (apt-get install bubblewrap)" >&2; exit 1; }
busybox=$(command -v busybox) || { echo "prepare-context: busybox is not installed (apt-get install busybox-static)" >&2; exit 1; }
# A dynamically linked busybox would need its own libraries; the static one does not.
if ldd "$busybox" >/dev/null 2>&1; then
	echo "prepare-context: $busybox is dynamically linked; install busybox-static" >&2
	exit 1
fi
root="$dir/rootfs"
rm -rf "$root"
mkdir -p "$root/usr/bin" "$root/usr/lib" "$root/usr/lib64" "$root/etc/aleph-sandbox" "$root/tmp" \
	"$root/var/lib/aleph-sandbox" "$root/run" "$root/proc" "$root/dev" "$root/sys" "$root/home/aleph"
chmod 1777 "$root/tmp"
# Merged /usr, as Debian's: the driver binds /usr, /bin, /lib, /lib64 into every sandbox.
ln -s usr/bin "$root/bin"
ln -s usr/bin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
for b in aleph-sandbox aleph-driver-bwrap aleph-sandbox-init; do
	[ -x "$bin/$b" ] || { echo "prepare-context: $bin/$b is missing (make build)" >&2; exit 1; }
	# Static (CGO_ENABLED=0): ldd says so; a dynamic one would need a loader the image lacks.
	if ldd "$bin/$b" >/dev/null 2>&1; then
		echo "prepare-context: $bin/$b is dynamically linked; build with CGO_ENABLED=0 (make build)" >&2
		exit 1
	fi
	install -m 0755 "$bin/$b" "$root/usr/bin/$b"
done
install -m 0755 "$bwrap" "$root/usr/bin/bwrap"
# Every library ldd names, at its real path under /usr (merged /usr: /lib/x is /usr/lib/x).
ldd "$bwrap" | awk '/=> \//{print $3} /^[[:space:]]*\/[^ ]+ \(/{print $1}' | while read -r lib; do
	real=$(readlink -f "$lib")
	dest="$root/usr${lib#/usr}"
	mkdir -p "$(dirname "$dest")"
	cp "$real" "$dest"
done
install -m 0755 "$busybox" "$root/usr/bin/busybox"
for applet in $("$busybox" --list); do
	[ -e "$root/usr/bin/$applet" ] || ln -s busybox "$root/usr/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\naleph:x:1000:1000:aleph:/home/aleph:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\naleph:x:1000:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
cp "$here/config.toml" "$root/etc/aleph-sandbox/config.toml"
cp "$here/Containerfile" "$dir/Containerfile"
