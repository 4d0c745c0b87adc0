#!/usr/bin/env bash
# Build the Python environment NVIDIA Dynamo runs from (engine=dynamo: its frontend and its
# mocker workers) once per machine, reuse it while it still holds the pinned version, and print
# its interpreter on stdout (everything else goes to stderr), e.g.
#   export TOKENFACTORY_DYNAMO_PYTHON=$(.ci/dynamo_venv.sh)
#
# Pinned to ai-dynamo 1.4.2 (and its Rust runtime wheel, ai-dynamo-runtime): releases 1.5 and
# later require `aisimulate`, whose registry package is a stub that fetches the real wheel from
# an index this machine cannot reach. tokenfactory supports >=1.4.2; on a machine with internet
# DYNAMO_VERSION=1.6.1 builds a newer one. Its own venv, like vLLM's: Dynamo is launched as
# processes (python -m dynamo.frontend / dynamo.mocker), never imported by the harness.
set -euo pipefail
DYNAMO_VERSION="${DYNAMO_VERSION:-1.4.2}"
CACHE="${TOKENFACTORY_CACHE:-$HOME/.cache/tokenfactory}"
DIR="${TOKENFACTORY_DYNAMO_VENV:-$CACHE/dynamo-venv}"
PY="$DIR/bin/python"

holds_pin() {
  "$1" -W ignore -c "import importlib.metadata as m, sys; import dynamo.frontend, dynamo.mocker; \
sys.exit(0 if m.version('ai-dynamo') == sys.argv[1] else 1)" "$DYNAMO_VERSION" >/dev/null 2>&1
}

if [ -x "$PY" ] && holds_pin "$PY"; then
  echo "dynamo venv: reusing $DIR (ai-dynamo $DYNAMO_VERSION)" >&2
  echo "$PY"
  exit 0
fi
# Build beside the final place and rename at the end: an interrupted build is never reused.
mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/dynamo-venv.build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
echo "dynamo venv: building ai-dynamo==$DYNAMO_VERSION in $DIR (a few minutes)" >&2
python3 -m venv "$TMP"
"$TMP/bin/python" -m pip install -q -U pip >&2
"$TMP/bin/python" -m pip install -q "ai-dynamo==$DYNAMO_VERSION" "ai-dynamo-runtime==$DYNAMO_VERSION" >&2
# A venv's scripts carry its absolute path: rewrite them for the final folder before the move.
grep -rlI --null "$TMP" "$TMP/bin" | xargs -0 -r sed -i "s|$TMP|$DIR|g"
holds_pin "$TMP/bin/python" || { echo "dynamo venv: the build does not import ai-dynamo $DYNAMO_VERSION" >&2; exit 1; }
rm -rf "$DIR"
mv "$TMP" "$DIR"
trap - EXIT
echo "$PY"
