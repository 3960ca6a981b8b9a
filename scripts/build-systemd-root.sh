#!/bin/bash
# make systemd-root: a Debian bookworm whose PID 1 is systemd, for the tests that boot the
# shipped units under a real systemd (systemd-nspawn; tests/controlplane/test_systemd_units.py).
# The debootstrap'd base of `make image` (build/image/base-bookworm.tar) plus Debian's systemd
# and python3.11 with its venv module, which the systemd install of docs/install.md, section
# 7, needs; the test installs the agent on a copy as that section says. Cached in
# build/systemd/bookworm-systemd.tar. Needs root. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

# /proc of the new root is mounted in a mount namespace of its own: it goes with this process.
if [ -z "${DRAIN_GUARD_SYSTEMD_ROOT_NAMESPACE:-}" ]; then
    exec unshare --mount --propagation private env DRAIN_GUARD_SYSTEMD_ROOT_NAMESPACE=1 "$0" "$@"
fi

BASE_TAR=build/image/base-bookworm.tar
OUT=build/systemd
TAR="$OUT/bookworm-systemd.tar"
# Current unless this script changed since.
[ -s "$TAR" ] && [ "$TAR" -nt "$0" ] && exit 0
[ -s "$BASE_TAR" ] || { echo "systemd-root: $BASE_TAR missing (make image)" >&2; exit 1; }

mkdir -p "$OUT"
work=$(mktemp -d "$PWD/$OUT/root.XXXXXX")
trap 'umount "$work/root/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/root"
tar -xf "$BASE_TAR" -C "$work/root"
# apt reaches Debian's packages as the host's does: the host's resolver, for the install only.
cp /etc/resolv.conf "$work/root/etc/resolv.conf"
mount -t proc proc "$work/root/proc"
chroot "$work/root" sh -c 'apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        systemd systemd-sysv python3.11 python3.11-venv >/dev/null &&
    apt-get clean && rm -rf /var/lib/apt/lists/*'
umount "$work/root/proc"
rm -f "$work/root/etc/resolv.conf"
# Each boot makes its own machine ID.
: >"$work/root/etc/machine-id"
tar --numeric-owner -C "$work/root" -cf "$TAR.part" .
mv "$TAR.part" "$TAR"
echo "systemd-root: $TAR" >&2
