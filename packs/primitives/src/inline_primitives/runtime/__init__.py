"""The torch runtime the ``primitives`` and ``zimage`` packs share (public; torch is imported
only when something runs): the worker's models (kept in ``ctx.cache``), prompt encoding, the
denoiser seam and its three implementations (local, batched, parallel), compile, and the VAE and
PNG helpers."""

from .._images import decode, encode, encode_png, latent_size
from .._runtime import activation_bytes, get_model, get_models, get_text_encoder, models_cache
from .._text import Conditioning, encode_prompts
from ._batch import BatchedDenoiser, memory_limit
from ._compile import CompiledTransformer, compile_mode
from ._decode import decode_batched
from ._denoise import Denoiser, DenoiseRequest, LocalDenoiser
from ._gather import BatchStats, Gatherer, Job
from ._parallel import ParallelDenoiser
from ._select import denoise, denoiser_for
from ._settings import batch_window_s, compile_setting, max_batch

__all__ = (
    "BatchStats",
    "BatchedDenoiser",
    "CompiledTransformer",
    "Conditioning",
    "DenoiseRequest",
    "Denoiser",
    "Gatherer",
    "Job",
    "LocalDenoiser",
    "ParallelDenoiser",
    "activation_bytes",
    "batch_window_s",
    "compile_mode",
    "compile_setting",
    "decode",
    "decode_batched",
    "denoise",
    "denoiser_for",
    "encode",
    "encode_png",
    "encode_prompts",
    "get_model",
    "get_models",
    "get_text_encoder",
    "latent_size",
    "max_batch",
    "memory_limit",
    "models_cache",
)
