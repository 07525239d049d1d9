"""Item 12: `inline pack list` shows a pack's active and previous versions apart, aligned."""

from __future__ import annotations

from inline_host.cli._packs import format_rows
from inline_registry import PackRow


def row(name: str, version: str, state: str, size: int = 0, nodes: tuple[str, ...] = ()) -> PackRow:
    return PackRow(
        name=name,
        version=version,
        sdk_version="1.4.0",
        node_types=nodes,
        size_bytes=size,
        state=state,
        source="folder: /src",
        dir="/d",
        disabled=(),
    )


def test_active_and_previous_versions_are_distinct_and_the_columns_align():
    text = format_rows(
        [
            row("basics", "1.0.0", "builtin", 12_300_000, ("input/text", "image/resize")),
            row("acme", "0.2.0", "active", 1_000_000, ("acme/say",)),
            row("acme", "0.1.0", "previous (rollback target)", 990_000, ("acme/say",)),
        ]
    )
    assert text == (
        "NAME             VERSION  SDK       VENV  STATE                       NODES\n"
        "basics           1.0.0    1.4.0  12.3 MB  builtin                     "
        "input/text, image/resize\n"
        "acme             0.2.0    1.4.0   1.0 MB  active                      acme/say\n"
        "acme (previous)  0.1.0    1.4.0   1.0 MB  previous (rollback target)  acme/say\n"
    )
