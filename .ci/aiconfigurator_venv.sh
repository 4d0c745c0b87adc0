#!/usr/bin/env bash
# Build the Python environment NVIDIA's aiconfigurator (the performance model behind the plan's
# estimated capacity: protocol.estimates) runs from, once per machine, reuse it while it holds
# the pinned version, and print its interpreter on stdout (everything else to stderr), e.g.
#   export TOKENFACTORY_ESTIMATOR_PYTHON=$(.ci/aiconfigurator_venv.sh)
# tokenfactory finds it at this path when protocol.estimator_python is null.
# Its own venv, like the engines': at 0.12.0 its pins resolve beside the harness's, but it brings
# bokeh, tornado, plotext and 80 MB of per-GPU performance data the harness does not need, and it
# is run as a subprocess (protocols/plan/aiconfigurator_points.py), never imported. The install
# takes about 30 s from the registry (two wheels: aiconfigurator and aiconfigurator-core).
set -euo pipefail
AIC_VERSION="${AIC_VERSION:-0.12.0}"
CACHE="${TOKENFACTORY_CACHE:-$HOME/.cache/tokenfactory}"
DIR="${TOKENFACTORY_AICONFIGURATOR_VENV:-$CACHE/aiconfigurator-venv}"
PY="$DIR/bin/python"

holds_pin() {
  "$1" -W ignore -c "import importlib.metadata as m, sys; import aiconfigurator.cli.api; \
sys.exit(0 if m.version('aiconfigurator') == sys.argv[1] else 1)" "$AIC_VERSION" >/dev/null 2>&1
}

if [ -x "$PY" ] && holds_pin "$PY"; then
  echo "aiconfigurator venv: reusing $DIR (aiconfigurator $AIC_VERSION)" >&2
  echo "$PY"
  exit 0
fi
# Build beside the final place and rename at the end: an interrupted build is never reused.
mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/aiconfigurator-venv.build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
echo "aiconfigurator venv: building aiconfigurator==$AIC_VERSION in $DIR (about a minute)" >&2
python3 -m venv "$TMP"
"$TMP/bin/python" -m pip install -q -U pip >&2
"$TMP/bin/python" -m pip install -q "aiconfigurator==$AIC_VERSION" >&2
# A venv's scripts carry its absolute path: rewrite them for the final folder before the move.
grep -rlI --null "$TMP" "$TMP/bin" | xargs -0 -r sed -i "s|$TMP|$DIR|g"
holds_pin "$TMP/bin/python" || { echo "aiconfigurator venv: the build does not import aiconfigurator $AIC_VERSION" >&2; exit 1; }
rm -rf "$DIR"
mv "$TMP" "$DIR"
trap - EXIT
echo "$PY"
