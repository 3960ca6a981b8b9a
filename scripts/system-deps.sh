#!/bin/sh
# Install the system tools the tests drive: promtool and a Prometheus server (Debian's
# `prometheus` package), an Alertmanager (`prometheus-alertmanager`), libfaketime, those
# that build the agent's image (`make image`: debootstrap and buildah), systemd-nspawn
# (`systemd-container`: the shipped units booted under systemd), and the node's container runtime
# and network (containerd, runc, containernetworking-plugins, iptables, and ipset for the
# network-policy enforcer's sets; the node fixture starts containerd itself). Idempotent; needs root (or sudo) only when something is missing.
set -eu
required=""
command -v promtool >/dev/null 2>&1 || required="$required prometheus"
command -v prometheus-alertmanager >/dev/null 2>&1 || required="$required prometheus-alertmanager"
command -v debootstrap >/dev/null 2>&1 || required="$required debootstrap"
command -v buildah >/dev/null 2>&1 || required="$required buildah"
command -v systemd-nspawn >/dev/null 2>&1 || required="$required systemd-container"
command -v containerd >/dev/null 2>&1 || required="$required containerd"
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || required="$required runc"
[ -x /usr/lib/cni/bridge ] || required="$required containernetworking-plugins"
# libfaketime: tests/controlplane/test_clock_step.py steps the agent's wall clock with it.
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || required="$required libfaketime"
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || required="$required iptables"
command -v ipset >/dev/null 2>&1 || [ -x /usr/sbin/ipset ] || required="$required ipset"
kubectl=""
command -v kubectl >/dev/null 2>&1 || command -v kustomize >/dev/null 2>&1 || kubectl="kubectl"
[ -z "$required$kubectl" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
echo "system-deps: installing$required${kubectl:+ $kubectl}" >&2
$SUDO apt-get update -qq
# Every package above is required, kubectl best effort (the manifest tests fall back to the
# kustomize renderer shipped in the venv). The tests start their own
# servers on free ports, whatever services the packages start.
if [ -n "$required" ]; then
    # shellcheck disable=SC2086 # a list of package names
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $required >/dev/null
fi
if [ -n "$kubectl" ]; then
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubectl >/dev/null 2>&1 || echo "system-deps: kubectl not available from apt" >&2
fi
