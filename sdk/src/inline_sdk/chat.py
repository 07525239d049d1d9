"""Chat completion: the ``ChatCompletion`` node base, its typed ``Completion`` (tool calls and
usage as JSON values), and how the host recognizes and reads a chat node (torch-free)."""

from ._chat import (
    CHAT_OUTPUTS,
    CHAT_PARAMS,
    ChatCompletion,
    ChatOutputs,
    Completion,
    TokenLogprob,
    ToolCall,
    TopLogprob,
    Usage,
    completion_outputs,
    is_chat_node,
    read_completion,
)

__all__ = (
    "CHAT_OUTPUTS",
    "CHAT_PARAMS",
    "ChatCompletion",
    "ChatOutputs",
    "Completion",
    "TokenLogprob",
    "ToolCall",
    "TopLogprob",
    "Usage",
    "completion_outputs",
    "is_chat_node",
    "read_completion",
)
