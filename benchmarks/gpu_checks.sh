#!/usr/bin/env bash
# The checks that need an NVIDIA GPU host, in one go (a few minutes):
#   1. benchmarks/energy_selftest.py: NVML's energy counter vs integrated power, and the
#      harness's collector vs direct counter reads;
#   2. a tokenfactory sweep of the embedded tiny model on `transformers serve --device cuda`,
#      with NVML telemetry and the energy block filled (results tarred into OUT);
#   3. benchmarks/loadgen_fidelity.py on a many-core host: one client process, then
#      client.workers=2 and 4, against truth servers on cores of their own.
# Usage: bash benchmarks/gpu_checks.sh OUT [PYTHON]
set -uo pipefail
OUT=${1:?usage: gpu_checks.sh OUT [PYTHON]}
PY=${2:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mkdir -p "$OUT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
NCPU=$(nproc)
echo "== host: $NCPU cores; $(nvidia-smi -L 2>&1 | head -2)"

echo "== 1. energy self-test"
timeout 120 "$PY" benchmarks/energy_selftest.py 2>&1 | tee "$OUT/energy_selftest.txt"

echo "== 2. tokenfactory sweep on transformers serve --device cuda"
RUN=/tmp/tf-gpu-run
rm -rf "$RUN"
timeout 420 "$PY" -m harness.cli run engine.device=cuda hardware=h200 cost=example_h100_rental \
  mlflow.enabled=false progress=false output_dir="$RUN" \
  'protocol.load_points=[8,32,128]' load.num_requests=300 2>&1 | tee "$OUT/gpu_run.txt"
tar -czf "$OUT/gpu_run.tgz" -C /tmp tf-gpu-run 2>/dev/null

echo "== 3. load-generator fidelity, worker scaling"
if [ "$NCPU" -ge 12 ]; then
  SRV=8,9,10,11
  for W in 1 2 4; do
    timeout 300 "$PY" benchmarks/loadgen_fidelity.py --no-vllm --seconds 3 --workers $W \
      --client-core "0-$((W - 1))" --server-core $SRV --streams 512,1024,2048 2>&1 \
      | tee -a "$OUT/fidelity.txt"
  done
else
  echo "fewer than 12 cores: worker scaling skipped" | tee -a "$OUT/fidelity.txt"
fi
