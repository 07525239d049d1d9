"""What a pack worker asks Ray for: GPUs and memory from the broker's estimate, plus custom
resources from ``INLINE_RAY_RESOURCES``.

A pack whose manifest names model files is a GPU pack (unless the profile is ``cpu``): it asks
for one GPU, so it lands on a node that has one. When the cluster has no GPU at all it runs on
CPU, as it would here, and says so in ``/v1/health``. Its ``memory`` is what the broker's
estimate gives for the files its nodes would load (the recommended file, else the folder's
first weight file; safetensors headers, nothing loaded); a pack
without model files (``basics``) asks for nothing and lands anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inline_core import HeaderError, estimate_paths
from inline_registry import MergedRegistry

from .._settings import Settings


@dataclass(frozen=True, slots=True)
class Demand:
    """A worker's Ray resource request."""

    num_gpus: float = 0.0
    memory: int = 0
    resources: Mapping[str, float] = field(default_factory=dict)
    #: Why the GPU ask was dropped, if it was.
    note: str = ""

    def options(self) -> dict[str, Any]:
        """As ``ActorClass.options(...)`` keywords."""
        opts: dict[str, Any] = {"num_cpus": 0, "num_gpus": self.num_gpus}
        if self.memory > 0:
            opts["memory"] = self.memory
        if self.resources:
            opts["resources"] = dict(self.resources)
        return opts

    def describe(self) -> dict[str, Any]:
        """For ``/v1/health``."""
        out: dict[str, Any] = {
            "numGpus": self.num_gpus,
            "memory": self.memory,
            "resources": dict(self.resources),
        }
        if self.note:
            out["note"] = self.note
        return out


def model_files(registry: MergedRegistry, settings: Settings, pack: str) -> tuple[bool, list[Path]]:
    """Whether the pack's nodes name model files, and those present in the models roots."""
    info = registry.packs.get(pack)
    if info is None:
        return False, []
    named = False
    found: list[Path] = []
    for node in info.manifest.nodes.values():
        for model in node.models:
            named = True
            path = _resolve(settings, model.category, model.file)
            if path is not None and path not in found:
                found.append(path)
    return named, found


def _resolve(settings: Settings, category: str, name: str) -> Path | None:
    """The file a node would load: the recommended one, else the folder's first weight file
    (the nodes' own fallback order, without the per-call picks)."""
    for root in settings.models_roots:
        if (root / category / name).exists():
            return root / category / name
    for root in settings.models_roots:
        folder = root / category
        if folder.is_dir() and name.endswith(".safetensors"):
            first = sorted(folder.glob("*.safetensors"))
            if first:
                return first[0]
    return None


def pack_demand(
    registry: MergedRegistry, settings: Settings, pack: str, cluster_gpus: float
) -> Demand:
    """The resource request of a worker of ``pack`` on a cluster with ``cluster_gpus`` GPUs."""
    named, files = model_files(registry, settings, pack)
    memory = 0
    for path in files:  # one by one: a tokenizer folder (no weights) or a bad file adds nothing
        try:
            memory += sum(c.bytes for c in estimate_paths([path]))
        except (HeaderError, OSError, ValueError):
            continue  # an unreadable file fails the load itself, with its own message
    wants_gpu = named and settings.profile != "cpu"
    note = ""
    if wants_gpu and cluster_gpus <= 0:
        wants_gpu = False
        note = "the cluster has no GPU: this GPU pack runs on CPU"
    return Demand(
        num_gpus=1.0 if wants_gpu else 0.0,
        memory=memory,
        resources=dict(settings.ray_resources.get(pack, {})),
        note=note,
    )


GIB = 1 << 30


def with_requirements(demand: Demand, requirements: Mapping[str, Any]) -> Demand:
    """``demand`` with what a model's card says one replica needs (``requirements`` of its
    ``inline.json``: written by the estimate, or by its owner, whose edit the estimate never
    overwrites): ``devices`` GPUs where the pack asks for GPUs at all, and ``ram_gb`` of
    memory. ``vram_gb`` is the node's broker's to plan (Ray schedules no VRAM). A value that is
    not a positive number is left out, said in the demand's note."""
    num_gpus, memory, bad = demand.num_gpus, demand.memory, []
    devices = requirements.get("devices")
    if devices is not None:
        if _positive(devices):
            num_gpus = float(devices) if demand.num_gpus > 0 else 0.0
        else:
            bad.append(f"devices {devices!r}")
    ram = requirements.get("ram_gb")
    if ram is not None:
        if _positive(ram):
            memory = int(float(ram) * GIB)
        else:
            bad.append(f"ram_gb {ram!r}")
    notes = [demand.note] if demand.note else []
    if bad:
        notes.append(f"the model card's {', '.join(bad)} ignored (not a positive number)")
    return Demand(num_gpus, memory, demand.resources, "; ".join(notes))


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
