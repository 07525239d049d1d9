#!/usr/bin/env bash
# Start Inline's /v1 server on 127.0.0.1:8848 (flags: ./webui.sh --help).
# Sets up uv, the workspace and the packs' venvs first; PyTorch runs with expandable segments.
set -euo pipefail
for arg in "$@"; do
  if [ "$arg" = "--help" ] || [ "$arg" = "-h" ]; then
    exec python3 "$(dirname "$0")/main.py" --help
  fi
  if [ "$arg" = "--version" ] && [ -x "$(dirname "$0")/.venv/bin/python" ]; then
    exec "$(dirname "$0")/.venv/bin/python" "$(dirname "$0")/main.py" --version
  fi
done
source "$(dirname "$0")/scripts/_bootstrap.sh"
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"
exec .venv/bin/python main.py "$@"
