"""``inline pack new NAME``: a third-party pack that installs and runs unchanged."""

from __future__ import annotations

from pathlib import Path

from inline_sdk import SDK_VERSION

from ._errors import PackInvalid
from ._rules import check_pack_name

PYPROJECT = """\
[project]
name = "inline-pack-{name}"
version = "0.1.0"
description = "Nodes for Inline: {name}"
readme = "README.md"
requires-python = ">=3.11"
# The SDK this pack is built against: it runs on every Inline host that speaks {major}.x.
dependencies = ["inline-sdk>={major}.{minor},<{next_major}"]

# The one entry point Inline loads the pack from: its name is the pack's name.
[project.entry-points."inline.packs"]
{name} = "{module}"

[build-system]
requires = ["uv_build>=0.8,<0.15"]
build-backend = "uv_build"

[tool.uv.build-backend]
module-name = "{module}"

# The pack manifest, validated strictly (an unknown key is an error naming it).
[tool.inline]
sdk = "{major}"
# The models/ folders its workers read; a sandboxed worker sees only these (unset: all of them).
model_categories = []

[tool.inline.nodes."{name}/hello"]
enabled = true
"""

MODULE = '''\
"""The {name} pack: nodes for Inline."""

from typing import Annotated

from inline_sdk import Context, NodeSpec, Output, Param, hookimpl, node


def greet(name: str) -> str:
    """The greeting for ``name``."""
    return f"Hello, {{name}}!"


@node("{name}/hello", title="Hello", category="{title}")
def hello(
    ctx: Context,
    *,
    name: Annotated[str, Param("Name")] = "World",
) -> Annotated[str, Output("text", "Text")]:
    """Greet ``name``."""
    ctx.progress(1, 1, phase="greet")
    return greet(name)


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    """The nodes of this pack (node ids start with the pack's name)."""
    return [hello]
'''

TEST = '''\
"""Run with the Python that runs Inline: PYTHONPATH=src python -m pytest tests"""

from {module} import greet, hello, inline_nodes


def test_hello_greets_by_name():
    assert greet("Ada") == "Hello, Ada!"
    assert [n.type for n in inline_nodes()] == ["{name}/hello"]
    params = [p.key for p in hello.descriptor.params]
    outputs = [o.id for o in hello.descriptor.outputs]
    assert params == ["name"] and outputs == ["text"]
'''

README = """\
# {name}

An Inline pack. It provides one node, `{name}/hello`: param `name`,
output `text`.

```sh
inline pack install .          # scan, build, lock, venv, handshake, then switch it on
inline pack list               # {name} {version}, its node ids, its venv size
inline pack upgrade {name}     # after bumping the version here
inline pack rollback {name}    # back to the version before
```

Run its test with the Python that runs Inline (it has the SDK):

```sh
PYTHONPATH=src python -m pytest tests
```

## Rules a pack follows

- Every node id starts with the pack's name (`{name}/...`); first-party packs own the bare ones.
- Dependencies come from the package index only, resolved against the platform's constraints
  (torch, numpy's major, the SDK): a pack cannot change torch.
- The install scans the source first: subprocess, ctypes, sockets, pickle loading, `exec`/`eval`,
  network access and binaries need the operator's `--allow RULE`; `setup.py`, build hooks and
  obfuscated code are refused.
- Nodes never download models: declare the files a node needs under
  `[[tool.inline.nodes."{name}/hello".models]]` and `inline models pull` fetches them.
"""

GITIGNORE = "__pycache__/\n*.pyc\ndist/\n.venv/\n"


def module_name(name: str) -> str:
    """The import package of pack ``name`` (never one of the host's own)."""
    return "inline_pack_" + name.replace("-", "_")


def scaffold_pack(name: str, parent: Path) -> Path:
    """Write the pack ``name`` into ``parent/name``; the folder written."""
    check_pack_name(name)
    root = parent / name
    if root.exists() and any(root.iterdir()):
        raise PackInvalid(str(root), "the folder exists and is not empty")
    major, minor = (int(p) for p in SDK_VERSION.split(".")[:2])
    module = module_name(name)
    fields = {
        "name": name,
        "module": module,
        "major": major,
        "minor": minor,
        "next_major": major + 1,
        "title": name.replace("-", " ").title(),
        "version": "0.1.0",
    }
    files = {
        "pyproject.toml": PYPROJECT,
        f"src/{module}/__init__.py": MODULE,
        "tests/test_hello.py": TEST,
        "README.md": README,
        ".gitignore": GITIGNORE,
    }
    for rel, template in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**fields))
    return root
