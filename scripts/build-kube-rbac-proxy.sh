#!/bin/bash
# make kube-rbac-proxy-image: the central shield's (and the agents') kube-rbac-proxy sidecar
# as a local image for the node tests, built here with no registry (docs/image.md).
#
#   1. kube-rbac-proxy VERSION from the Go module proxy (`go mod download`), built with
#      CGO_ENABLED=0 in a writable copy of the module's directory (the module cache is
#      read-only), into build/kube-rbac-proxy/. v0.19.1 is the newest the module proxy
#      serves: it refuses v0.20.0, v0.20.1 and v0.21.0, the version
#      daemonset/components/kube-rbac-proxy pins from quay.io ("This module version is not
#      available"; docs/control-plane.md says what that leaves untested).
#   2. An image of that one static binary, `buildah from scratch` (no network: --network none
#      is the default of a build with nothing to run), user 65532 as the shipped image's,
#      written as an OCI archive, build/image/kube-rbac-proxy.oci.tar, named
#      localhost/kube-rbac-proxy:VERSION, for `ctr -n k8s.io images import`.
#
# Does nothing when the archive is there and was built by this script as it is (its sha256 in
# build/image/kube-rbac-proxy.key); the binary is kept by version. Needs root (buildah).
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$self")/.."
ARCHIVE=build/image/kube-rbac-proxy.oci.tar
STAMP=build/image/kube-rbac-proxy.key
key=$(sha256sum "$self" | cut -d' ' -f1)
if [ -s "$ARCHIVE" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$key" ]; then
    exit 0
fi

if [ -z "${DRAIN_GUARD_IMAGE_NAMESPACE:-}" ]; then
    exec unshare --mount --propagation private env DRAIN_GUARD_IMAGE_NAMESPACE=1 "$self" "$@"
fi

VERSION=v0.19.1
MODULE=github.com/brancz/kube-rbac-proxy
IMAGE="localhost/kube-rbac-proxy:$VERSION"
OUT=build/image
WORK=build/kube-rbac-proxy
BINARY="$WORK/kube-rbac-proxy-$VERSION"

mkdir -p "$OUT" "$WORK"
if [ ! -x "$BINARY" ]; then
    if ! command -v go >/dev/null 2>&1; then
        echo "kube-rbac-proxy: needs Go 1.22 or newer on the PATH (as make control-plane does)" >&2
        exit 2
    fi
    echo "kube-rbac-proxy: building $MODULE@$VERSION (a first build takes minutes)" >&2
    dir=$(cd /tmp && go mod download -json "$MODULE@$VERSION" |
        sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    [ -d "$dir" ] || { echo "kube-rbac-proxy: go mod download gave no directory" >&2; exit 1; }
    rm -rf "$WORK/src"
    cp -r "$dir" "$WORK/src"
    chmod -R u+w "$WORK/src"
    (cd "$WORK/src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
        -o "../$(basename "$BINARY").part" ./cmd/kube-rbac-proxy)
    mv "$BINARY.part" "$BINARY"
    rm -rf "$WORK/src"
fi

runroot=$(mktemp -d "$PWD/$OUT/run.XXXXXX")
trap 'rm -rf "$runroot"' EXIT
buildah() {
    command buildah --root "$PWD/$OUT/storage" --runroot "$runroot" --storage-driver overlay "$@"
}
container=$(buildah from --network none scratch)
buildah copy --quiet "$container" "$BINARY" /usr/local/bin/kube-rbac-proxy
buildah config --entrypoint '["/usr/local/bin/kube-rbac-proxy"]' --user 65532:65532 \
    "$container"
buildah commit --quiet --rm "$container" "$IMAGE" >/dev/null
rm -f "$ARCHIVE.part"
buildah push --quiet "$IMAGE" "oci-archive:$ARCHIVE.part:$IMAGE"
mv "$ARCHIVE.part" "$ARCHIVE"
echo "$key" >"$STAMP"
echo "kube-rbac-proxy: $IMAGE in $ARCHIVE" >&2
