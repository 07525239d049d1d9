# Sourced by scripts/run and scripts/test: installs uv if missing, syncs the workspace, and points
# uv at local wheels and the platform constraints so that no CUDA torch is ever downloaded on CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
UV_VERSION="0.13.9"
if command -v uv >/dev/null 2>&1; then
  UV=(uv)
elif python3 -m uv --version >/dev/null 2>&1; then
  UV=(python3 -m uv)
else
  echo "Installing uv ${UV_VERSION}..." >&2
  python3 -m pip install --quiet "uv==${UV_VERSION}"
  UV=(python3 -m uv)
fi
# uv does not read pip's settings: map pip's find-links folder, pin torch for this platform.
if [ -z "${UV_FIND_LINKS:-}" ] && [ -n "${PIP_FIND_LINKS:-}" ]; then
  export UV_FIND_LINKS="$PIP_FIND_LINKS"
fi
export INLINE_CONSTRAINTS="${INLINE_CONSTRAINTS:-$ROOT/constraints/platform.txt}"
# The server's venv gets no dev tools (pytest, ruff, pyright, schemathesis...): scripts/run sets
# INLINE_SYNC=serve and syncs without the dev group, keeping what a test run added (--inexact);
# scripts/test syncs everything, exactly.
if [ "${INLINE_SYNC:-all}" = "serve" ]; then
  "${UV[@]}" sync --frozen --all-extras --no-dev --inexact --quiet
else
  "${UV[@]}" sync --frozen --all-extras --quiet
fi
# Pack workers run in a bubblewrap sandbox: install it where apt can (as root). Without it the
# first-party packs run unsandboxed (the server says so) and third-party ones are refused.
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
  && [ "$(id -u)" = "0" ]; then
  echo "Installing bubblewrap (the pack sandbox)..." >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) \
    >/dev/null 2>&1 || echo "warning: could not install bubblewrap" >&2
fi
