"""``python -m inline_host``: the bare server, bound to ``INLINE_HOST``:``INLINE_PORT``."""

from __future__ import annotations

import argparse
import logging
import sys

from .api import serve

DESCRIPTION = """Serve the Inline /v1 API.

Configuration comes from the environment:
  INLINE_HOST        interface to bind (default 127.0.0.1; others need INLINE_TOKEN)
  INLINE_PORT        port (default 8848)
  INLINE_TOKEN       bearer token every request must carry (required beyond loopback)
  INLINE_DATA_DIR    runs, takes, blobs and pack venvs (default ./.inline); one host
                     per data dir (a second is refused, exit 2)
  INLINE_MODELS_DIR  model files (default ./models)
  INLINE_RAY_ADDRESS run pack workers on this Ray cluster; it must answer within
                     INLINE_RAY_CONNECT_TIMEOUT seconds (default 30), else exit 2
"""

if __name__ == "__main__":
    argparse.ArgumentParser(
        prog="python -m inline_host",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ).parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(serve())
