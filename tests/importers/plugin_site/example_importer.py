"""A third-party source, installed as a package would be (a dist-info with an entry point in
``inline.importers``): ``example:NAME`` serves the models of a small in-memory catalog. The host
knows nothing of it; it is found through the ``inline_importers`` hook."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from inline_host.importers import (
    Importer,
    ModelFile,
    SourceError,
    WeightCount,
    hookimpl,
    weight_count,
)


def _weights(params: int) -> bytes:
    header = {"w": {"dtype": "F16", "shape": [params], "data_offsets": [0, 2 * params]}}
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(2 * params)


CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
          "num_attention_heads": 2, "hidden_size": 16}  # fmt: skip
CATALOG: dict[str, dict[str, bytes]] = {
    "tiny": {"config.json": json.dumps(CONFIG).encode(), "model.safetensors": _weights(3000)},
    "empty": {"config.json": b"{}"},
}


class ExampleImporter(Importer):
    prefix: ClassVar[str] = "example"
    about: ClassVar[str] = "the example catalog (a test plugin)"

    def __init__(self, model: str, **kw: Any) -> None:
        super().__init__(model, **kw)
        if model not in CATALOG:
            raise SourceError(f"example:{model}: the example catalog has no such model")

    @property
    def name(self) -> str:
        return self.model

    def infer_category(self) -> str:
        return "llm"

    def config(self) -> dict[str, Any] | None:
        return json.loads(CATALOG[self.model]["config.json"])

    def files(self) -> list[ModelFile]:
        return [ModelFile(p, len(b)) for p, b in sorted(CATALOG[self.model].items())]

    def weights(self) -> list[WeightCount]:
        out = []
        for path, data in sorted(CATALOG[self.model].items()):
            if path.endswith(".safetensors"):
                (n,) = struct.unpack("<Q", data[:8])
                out.append(weight_count(path, len(data), json.loads(data[8 : 8 + n])))
        return out

    def fetch_file(self, file: ModelFile, part: Path, progress: Callable[[int], object]) -> None:
        data = CATALOG[self.model][file.path]
        have = part.stat().st_size if part.exists() else 0
        with part.open("ab") as fh:
            fh.write(data[have:])
        progress(len(data))


@hookimpl
def inline_importers() -> list[type[Importer]]:
    return [ExampleImporter]
