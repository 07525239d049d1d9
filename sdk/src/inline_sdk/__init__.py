"""The Inline node SDK: everything a pack author imports.

Light by design: the standard library, msgspec and pluggy only; no torch at import.
"""

from ._comfyui import ComfyMapping
from ._context import Context, InputRefused, SecretMissing
from ._declare import Output, Param, Port
from ._descriptor import Descriptor, ModelStatus, Option, ParamField, PortSpec
from ._errors import (
    Cancelled,
    FrameTooLarge,
    InlineSdkError,
    NodeDeclarationError,
    ParamIssue,
    ParamsInvalid,
    ProtocolError,
)
from ._kinds import HANDLE_KINDS, MEDIA_KINDS, PORT_KINDS, is_list_kind, port_satisfies
from ._media import AssetIdRef, AssetRef, Audio, Image, Mask, Media, MeshFile, PathRef, Video
from ._memory import Memory
from ._models import (
    ENCODER,
    LLM_ARCHITECTURES,
    MODEL_ARCHITECTURES,
    WEIGHT_SUFFIXES,
    LlmArchitecture,
    UnsafeName,
    check_model_name,
    is_encoder_folder,
    is_weight_entry,
    llm_architecture,
)
from ._node import NodeSpec, node
from ._placement import LocalPlacement, local_placement
from ._state import WorkerCache, WorkerStats
from ._version import SDK_MAJOR, SDK_VERSION
from .hookspecs import hookimpl

__all__ = (
    "ENCODER",
    "LLM_ARCHITECTURES",
    "MODEL_ARCHITECTURES",
    "WEIGHT_SUFFIXES",
    "LlmArchitecture",
    "LocalPlacement",
    "UnsafeName",
    "check_model_name",
    "is_encoder_folder",
    "is_weight_entry",
    "llm_architecture",
    "local_placement",
    "HANDLE_KINDS",
    "MEDIA_KINDS",
    "PORT_KINDS",
    "SDK_MAJOR",
    "SDK_VERSION",
    "AssetIdRef",
    "AssetRef",
    "Audio",
    "Cancelled",
    "ComfyMapping",
    "Context",
    "Descriptor",
    "FrameTooLarge",
    "Image",
    "InlineSdkError",
    "InputRefused",
    "Mask",
    "Media",
    "Memory",
    "MeshFile",
    "ModelStatus",
    "NodeDeclarationError",
    "NodeSpec",
    "Option",
    "Output",
    "Param",
    "ParamField",
    "ParamIssue",
    "ParamsInvalid",
    "PathRef",
    "Port",
    "PortSpec",
    "ProtocolError",
    "SecretMissing",
    "Video",
    "WorkerCache",
    "WorkerStats",
    "hookimpl",
    "is_list_kind",
    "node",
    "port_satisfies",
)
