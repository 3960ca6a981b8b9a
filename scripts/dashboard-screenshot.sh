#!/bin/sh
# docs/dashboard.png: the dashboard's panels as a real Prometheus answers them for one agent
# holding a drain on the simulator (the test that checks the dashboard's queries draws them
# into a static page), rendered by headless Chromium (apt-get install chromium).
set -eu
cd "$(dirname "$0")/.."
page="$(mktemp -d)/dashboard.html"
DRAIN_GUARD_DASHBOARD_PAGE="$page" DRAIN_GUARD_DASHBOARD_SECONDS="${SECONDS_OF_DATA:-60}" \
  .venv/bin/pytest -q -p no:cacheprovider tests/observability/test_dashboard.py -k series
profile="$(mktemp -d)"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --hide-scrollbars --window-size=1250,1420 \
  --screenshot="$PWD/docs/dashboard.png" "file://$page"
