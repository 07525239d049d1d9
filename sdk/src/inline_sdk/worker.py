"""``python -m inline_sdk.worker --fd N --pack NAME``: serve one pack to the host."""

from inline_sdk._worker import run

if __name__ == "__main__":
    raise SystemExit(run())
