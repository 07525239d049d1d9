"""A text model's whole life from Python: import it, size it, deploy it, ask it, undeploy it,
remove it.

    .venv/bin/python examples/deploy_text_model.py file:/path/to/a/causal-lm [--url URL]

The source is anything ``inline models import`` takes (``hf:ORG/NAME``, ``url:...``,
``file:...``). The importer runs here, into the server's models dir (``INLINE_MODELS_DIR``, as
the server has it); the rest goes through the running server with ``inline-client``. The token
is ``INLINE_TOKEN`` or the data dir's operator token (loopback needs none to read, but deploying
and removing do).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from inline_client import Client
from inline_host.importers import importer_for


def operator_token() -> str | None:
    """``INLINE_TOKEN``, else the data dir's operator token (as the CLI finds it)."""
    if os.environ.get("INLINE_TOKEN"):
        return os.environ["INLINE_TOKEN"]
    data = Path(os.environ.get("INLINE_DATA_DIR") or ".inline")
    token = data / "operator-token"
    return token.read_text().strip() if token.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="hf:ORG/NAME, url:..., file:/path/to/folder")
    parser.add_argument("--url", default="http://127.0.0.1:8848", help="the Inline server")
    parser.add_argument("--prompt", default="Say hello.")
    args = parser.parse_args(argv)

    # 1. name and size it (headers only: nothing is fetched yet), then fetch it
    imp = importer_for(args.source, task="llm")
    need = imp.requirements()
    print(f"{imp.source}: {imp.name} ({imp.category}), {need.params:,} parameters; one replica "
          f"needs {need.vram_gb} GB VRAM, {need.ram_gb} GB RAM, {need.devices} GPU")  # fmt: skip
    folder = imp.fetch(progress=lambda p: None)
    print(f"fetched into {folder}; its card: requirements {imp.card()['requirements']}")

    with Client(args.url, operator_token()) as client:
        listed = {m.name: m for m in client.list_models()}
        assert imp.name in listed, f"the server does not see {imp.name}"
        # 2. deploy it: one replica, loaded and kept
        deployment = client.deploy(imp.name, name=imp.name, replicas=1, wait=True)
        print(f"deployed {deployment.name}: {deployment.state}, {deployment.target} replica")
        try:
            # 3. ask it (streamed)
            text = "".join(
                chunk.content
                for chunk in client.complete(
                    imp.name, [{"role": "user", "content": args.prompt}],
                    max_new_tokens=16, temperature=0.0,
                )
            )  # fmt: skip
            print(f"reply: {text!r}")
        finally:
            # 4. undeploy it
            client.undeploy(deployment.name)
            print(f"undeployed {deployment.name}")
        # 5. remove it
        removed = client.remove_model(imp.name)
        print(f"removed {removed.folder}/{removed.name}")
        assert imp.name not in {m.name for m in client.list_models()}
    return 0


if __name__ == "__main__":
    sys.exit(main())
