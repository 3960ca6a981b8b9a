#!/bin/bash
# make network-policy-enforcer: a NetworkPolicy enforcer for the node tests, whose bridge CNI
# plugin enforces none (simulator/drain_guard_sim/harness/netpolicy.py runs its network policy
# controller alone on the node).
#
# kube-router VERSION (github.com/cloudnativelabs/kube-router/v2) from the Go module proxy
# (`go mod download`), built with CGO_ENABLED=0 in a writable copy of the module's directory
# (the module cache is read-only), into build/kube-router/kube-router. Nothing of its source
# enters this repository. v2.1.0 is the only v2 the module proxy lists; advisories are
# reported against it: it runs in the node tests only, on this machine's own bridge, with a
# ServiceAccount that reads and writes nothing else.
#
# Does nothing when the binary is there and was built by this script as it is (its sha256 in
# build/kube-router/key).
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$self")/.."
VERSION=v2.1.0
MODULE=github.com/cloudnativelabs/kube-router/v2
WORK=build/kube-router
BINARY="$WORK/kube-router"
STAMP="$WORK/key"
key=$(sha256sum "$self" | cut -d' ' -f1)
if [ -x "$BINARY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$key" ]; then
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    echo "kube-router: needs Go 1.22 or newer on the PATH (as make control-plane does)" >&2
    exit 2
fi
echo "kube-router: building $MODULE@$VERSION (a first build takes minutes)" >&2
mkdir -p "$WORK"
dir=$(cd /tmp && go mod download -json "$MODULE@$VERSION" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "kube-router: go mod download gave no directory" >&2; exit 1; }
rm -rf "$WORK/src"
cp -r "$dir" "$WORK/src"
chmod -R u+w "$WORK/src"
(cd "$WORK/src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "../$(basename "$BINARY").part" ./cmd/kube-router)
mv "$BINARY.part" "$BINARY"
rm -rf "$WORK/src"
echo "$key" >"$STAMP"
echo "kube-router: $BINARY" >&2
