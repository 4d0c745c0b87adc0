#!/usr/bin/env bash
# Build the Python environment NVIDIA's AIPerf (a peer benchmark) runs from, once per machine, reuse
# it while it holds the pinned version, and print its `aiperf` command on stdout (everything else to
# stderr), e.g.
#   export TOKENFACTORY_AIPERF=$(.ci/aiperf_venv.sh)
# The trace readers' integration test (tests/loadgen/workloads/traces/test_aiperf_generated.py) has
# AIPerf's own generator write its agentic dataset and reads it back with loadgen's reader.
# Its own venv, like the engines': AIPerf pins its own pydantic, zmq and HTTP stacks, and it is
# only ever run as a command, never imported.
set -euo pipefail
AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"
CACHE="${TOKENFACTORY_CACHE:-$HOME/.cache/tokenfactory}"
DIR="${TOKENFACTORY_AIPERF_VENV:-$CACHE/aiperf-venv}"
PY="$DIR/bin/python"

holds_pin() {
  "$1" -W ignore -c "import importlib.metadata as m, sys; import aiperf; \
sys.exit(0 if m.version('aiperf') == sys.argv[1] else 1)" "$AIPERF_VERSION" >/dev/null 2>&1
}

if [ -x "$PY" ] && holds_pin "$PY"; then
  echo "aiperf venv: reusing $DIR (aiperf $AIPERF_VERSION)" >&2
  echo "$DIR/bin/aiperf"
  exit 0
fi
# Build beside the final place and rename at the end: an interrupted build is never reused.
mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/aiperf-venv.build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
echo "aiperf venv: building aiperf==$AIPERF_VERSION in $DIR (a minute or two)" >&2
python3 -m venv "$TMP"
"$TMP/bin/python" -m pip install -q -U pip >&2
"$TMP/bin/python" -m pip install -q "aiperf==$AIPERF_VERSION" >&2
# A venv's scripts carry its absolute path: rewrite them for the final folder before the move.
grep -rlI --null "$TMP" "$TMP/bin" | xargs -0 -r sed -i "s|$TMP|$DIR|g"
holds_pin "$TMP/bin/python" || { echo "aiperf venv: the build does not import aiperf $AIPERF_VERSION" >&2; exit 1; }
rm -rf "$DIR"
mv "$TMP" "$DIR"
trap - EXIT
echo "$DIR/bin/aiperf"
