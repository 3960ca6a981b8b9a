#!/bin/bash
# make image: build the agent's image from the Dockerfile on a machine with no container
# registry, with Debian's own tools (docs/image.md says why this way).
#
#   1. BASE: Debian bookworm, made once by `debootstrap --variant=minbase` (what a registry's
#      debian:bookworm-slim is), cached as build/image/base-bookworm.tar and as the local
#      image localhost/drain-guard-base:bookworm.
#   2. The Dockerfile built by buildah against it (--build-arg BASE=...), its layers cached:
#      a second run rebuilds only what changed.
#   3. The image written as an OCI archive, build/image/drain-guard.oci.tar, whose one image is
#      named localhost/drain-guard:VERSION (VERSION from pyproject.toml), for
#      `ctr -n k8s.io images import` or `podman load`.
#
# buildah runs with its own storage under build/image, in a mount namespace of its own, with
# chroot isolation (no container runtime, no systemd) and so the host's network: the build's
# apt reaches Debian's packages as the host's does (pip reaches no index: step 2 of
# docs/image.md). buildah's default network would make a bridge and turn on ip_forward; the
# host's creates nothing. Needs root. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

# In a mount namespace of its own: every mount buildah makes (its storage's, each layer's, the
# build's) goes with this process, however it ends; the host's mount table is left as it was.
if [ -z "${DRAIN_GUARD_IMAGE_NAMESPACE:-}" ]; then
    exec unshare --mount --propagation private env DRAIN_GUARD_IMAGE_NAMESPACE=1 "$0" "$@"
fi

OUT=build/image
BASE_TAR="$OUT/base-bookworm.tar"
BASE_IMAGE=localhost/drain-guard-base:bookworm
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
IMAGE="localhost/drain-guard:$VERSION"
ARCHIVE="$OUT/drain-guard.oci.tar"
PYTHON=.venv/bin/python

mkdir -p "$OUT"
# buildah's run-time state (mount counts, locks) lives as long as the namespace above.
runroot=$(mktemp -d "$PWD/$OUT/run.XXXXXX")
trap 'rm -rf "$runroot"' EXIT
buildah() {
    command buildah --root "$PWD/$OUT/storage" --runroot "$runroot" --storage-driver overlay "$@"
}

if [ ! -s "$BASE_TAR" ]; then
    echo "image: debootstrap --variant=minbase bookworm (once; cached in $BASE_TAR)" >&2
    work=$(mktemp -d "$PWD/$OUT/debootstrap.XXXXXX")
    trap 'rm -rf "$work" "$runroot"' EXIT
    debootstrap --variant=minbase bookworm "$work/root" >"$work/debootstrap.log" 2>&1 ||
        { tail -20 "$work/debootstrap.log" >&2; exit 1; }
    # The security and updates suites too, as the registry's image has them: from the mirror
    # debootstrap used.
    mirror=$(awk '$1 == "deb" { print $2; exit }' "$work/root/etc/apt/sources.list")
    cat >"$work/root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF
    rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
    tar --numeric-owner -C "$work/root" -cf "$BASE_TAR.part" .
    mv "$BASE_TAR.part" "$BASE_TAR"
    rm -rf "$work"
fi

if ! buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    container=$(buildah from scratch)
    buildah add --quiet "$container" "$BASE_TAR" /
    buildah config --cmd /bin/bash "$container"
    buildah commit --quiet --rm "$container" "$BASE_IMAGE" >/dev/null
fi

# The agent's wheels and its build backend's, fetched by the host's pip (configured for this
# machine's way to PyPI) for the image's Python, 3.11, which Debian bookworm's python3 is.
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), "image: needs Python 3.11"'
# From a copy of what the Dockerfile copies: resolving the project writes setuptools' metadata
# where it is, and the source tree stays clean.
rm -rf "$OUT/wheels" "$OUT/context"
mkdir "$OUT/context"
tar -c --exclude=__pycache__ --exclude='*.egg-info' pyproject.toml README.md agent docs/rights.md |
    tar -x -C "$OUT/context"
mapfile -t build_requires < <("$PYTHON" -c 'import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
"$PYTHON" -m pip download --quiet --dest "$OUT/wheels" "./$OUT/context" "${build_requires[@]}"
rm -rf "$OUT/context"

buildah build --quiet --layers --pull=never --isolation chroot --network host \
    --build-context "wheels=$OUT/wheels" --build-arg PIP_NO_INDEX=1 \
    --build-arg "BASE=$BASE_IMAGE" -t "$IMAGE" -f Dockerfile . >/dev/null
rm -f "$ARCHIVE.part"
buildah push --quiet "$IMAGE" "oci-archive:$ARCHIVE.part:$IMAGE"
mv "$ARCHIVE.part" "$ARCHIVE"
echo "image: $IMAGE in $ARCHIVE" >&2
