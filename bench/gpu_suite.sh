#!/usr/bin/env bash
# The one-GPU checks in one go, for a lent GPU machine: gpu_zimage, gpu_batching, gpu_compile and
# gpu_memory, each under its own time limit, one failing not stopping the rest. Writes DEST/gpu.txt
# (the card), DEST/suite.log (every script's output and exit status, in order) and each script's
# result JSON under DEST. Extra arguments go to every script (``--smoke``: the CPU dry run).
#   bash bench/gpu_suite.sh DEST [--smoke]
set -u
DEST=${1:?usage: bench/gpu_suite.sh DEST [--smoke]}
shift
mkdir -p "$DEST"
export PYTHONUNBUFFERED=1 INLINE_BENCH_RESULTS=$DEST
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } \
  >"$DEST/gpu.txt" 2>&1
for spec in gpu_zimage:130 gpu_batching:90 gpu_compile:210 gpu_memory:120; do
  name=${spec%%:*}
  limit=${spec##*:}
  start=$(date +%s)
  echo "=== $name (limit ${limit}s)" >>"$DEST/suite.log"
  timeout "$limit" "$PY" "bench/$name.py" "$@" >>"$DEST/suite.log" 2>&1
  rc=$?
  echo "=== $name rc=$rc in $(($(date +%s) - start))s" | tee -a "$DEST/suite.log"
done
