#!/usr/bin/env bash
# Build the environment lm-eval (EleutherAI's lm-evaluation-harness) runs from, once per machine,
# reuse it while it holds the pinned version, and print its `lm_eval` on stdout (everything else
# to stderr), e.g.
#   export TOKENFACTORY_LM_EVAL=$(.ci/lm_eval_venv.sh)
# The quality gate's external evaluation runs it against the engine under test (README,
# "Quality gate").  Its own venv: it pins datasets/evaluate versions tokenfactory need not share.
# The [api] extra brings what its local-completions model needs (tenacity, aiohttp, ...), and
# transformers (its tokenizer backend) is not in that extra.
set -euo pipefail
LM_EVAL_VERSION="${LM_EVAL_VERSION:-0.4.13}"
CACHE="${TOKENFACTORY_CACHE:-$HOME/.cache/tokenfactory}"
DIR="${TOKENFACTORY_LM_EVAL_VENV:-$CACHE/lm-eval-venv}"
BIN="$DIR/bin/lm_eval"

holds_pin() {
  "$1/bin/python" -c "import importlib.metadata as m, sys, transformers, tenacity; \
sys.exit(0 if m.version('lm-eval') == sys.argv[1] else 1)" "$LM_EVAL_VERSION" >/dev/null 2>&1
}

if [ -x "$BIN" ] && holds_pin "$DIR"; then
  echo "lm-eval venv: reusing $DIR (lm-eval $LM_EVAL_VERSION)" >&2
  echo "$BIN"
  exit 0
fi
mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/lm-eval-venv.build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
echo "lm-eval venv: building lm-eval[api]==$LM_EVAL_VERSION in $DIR (a few minutes)" >&2
python3 -m venv "$TMP"
"$TMP/bin/python" -m pip install -q -U pip >&2
"$TMP/bin/python" -m pip install -q "lm-eval[api]==$LM_EVAL_VERSION" transformers >&2
grep -rlI --null "$TMP" "$TMP/bin" | xargs -0 -r sed -i "s|$TMP|$DIR|g"
holds_pin "$TMP" || { echo "lm-eval venv: the build does not import lm-eval $LM_EVAL_VERSION" >&2; exit 1; }
rm -rf "$DIR"
mv "$TMP" "$DIR"
trap - EXIT
echo "$BIN"
