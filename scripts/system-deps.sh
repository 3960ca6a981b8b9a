#!/bin/sh
# Install the system tools the tests drive: promtool and a Prometheus server (Debian's
# `prometheus` package). Idempotent; needs root (or sudo) only when something is missing.
set -eu
missing=""
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
command -v kubectl >/dev/null 2>&1 || command -v kustomize >/dev/null 2>&1 || missing="$missing kubectl"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
echo "system-deps: installing$missing" >&2
$SUDO apt-get update -qq
# kubectl may not be packaged everywhere; prometheus is required, kubectl best effort
# (the manifest tests fall back to the kustomize renderer shipped in the venv).
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
case "$missing" in *kubectl*) $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubectl >/dev/null 2>&1 || echo "system-deps: kubectl not available from apt" >&2 ;; esac
