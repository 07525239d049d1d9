"""Text nodes: the contract's ``input/text`` source and ``text/join``."""

from typing import Annotated

from inline_sdk import Context, Output, Param, Port, node


@node("input/text", title="Prompt", category="Input", icon="type", hidden=True)
def input_text(
    ctx: Context,
    *,
    text: Annotated[str, Param("Text", widget="textarea")] = "",
) -> Annotated[str, Output("text", "Text")]:
    """Emit the ``text`` param as the node's ``text`` output."""
    return text


@node("text/join", title="Join Text", category="Text", icon="text")
def join_text(
    ctx: Context,
    a: Annotated[str, Port("A")],
    b: Annotated[str, Port("B")],
    *,
    separator: Annotated[str, Param("Separator")] = " ",
) -> Annotated[str, Output("text", "Text")]:
    """``a``, then ``separator``, then ``b``."""
    return f"{a}{separator}{b}"
