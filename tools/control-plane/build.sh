#!/bin/bash
# Builds kube-apiserver, kube-controller-manager and etcd from the Go module proxy into
# tools/control-plane/bin, at the versions go.mod pins, and the node's kubelet, kube-scheduler
# and kube-proxy from the same k8s.io/kubernetes module, with its static pause binary
# (cmd/pause); does nothing when they are current (bin/.stamp holds the go.sum they were
# built from).
set -euo pipefail
cd "$(dirname "$0")"
out=bin
stamp="$out/.stamp"
key="$(sha256sum go.mod go.sum build.sh | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] \
    && [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-controller-manager" ] && [ -x "$out/etcd" ] \
    && [ -x "$out/kubelet" ] && [ -x "$out/kube-scheduler" ] && [ -x "$out/kube-proxy" ] \
    && [ -x "$out/pause" ]; then
    exit 0
fi
need="$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)"
if ! command -v go >/dev/null 2>&1; then
    echo "control-plane: needs Go $need or newer on the PATH (Debian: apt-get install golang-go is too old; see README)" >&2
    exit 2
fi
have="$(go env GOVERSION | sed 's/^go//')"
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    echo "control-plane: Go $have is older than the $need that go.mod needs" >&2
    exit 2
fi
kube_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
etcd_version="$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
IFS=. read -r kube_major kube_minor _ <<<"${kube_version#v}"
base=k8s.io/component-base/version
ldflags="-s -w -X $base.gitVersion=$kube_version -X $base.gitMajor=$kube_major -X $base.gitMinor=$kube_minor"
ldflags="$ldflags -X $base.gitTreeState=clean -X $base.buildDate=1970-01-01T00:00:00Z"
mkdir -p "$out"
echo "control-plane: building kube-apiserver, kube-controller-manager, kubelet, kube-scheduler and kube-proxy $kube_version, etcd $etcd_version (a first build takes minutes)" >&2
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-proxy
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/pause" ./cmd/pause
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
echo "$key" >"$stamp"
