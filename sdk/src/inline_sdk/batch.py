"""Cross-request batching for nodes (torch-free): concurrent calls of one worker gathered into
batches by a compatibility key (``Gatherer``), each call getting its own result or error."""

from ._gather import BatchStats, Gatherer, Job

__all__ = ("BatchStats", "Gatherer", "Job")
