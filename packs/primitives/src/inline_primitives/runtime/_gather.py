"""Gathering calls from different threads into batches: the SDK's ``inline_sdk.batch``, which
the denoiser and the VAE decode share with the other packs' batching nodes."""

from inline_sdk.batch import BatchStats, Gatherer, Job

__all__ = ("BatchStats", "Gatherer", "Job")
