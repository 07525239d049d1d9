"""The text encoder: where its tokenizer comes from, and prompt encoding as Z-Image does it.

The Comfy-Org single file (``text_encoders/qwen_3_4b.safetensors``) carries weights only. Its
tokenizer is read from a folder next to it: ``<name>_tokenizer/``, else the family's
``qwen_3_4b_tokenizer/`` (what ``inline models pull alibaba/z-image-turbo`` fetches from
Tongyi-MAI/Z-Image-Turbo). An HF-format folder carries its own tokenizer (in the folder, its
``tokenizer/`` subfolder, or a pipeline's sibling ``tokenizer/``). Nothing is ever downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ._zimage import TOKENIZER_FOLDER

TOKENIZER_FILES: Final = ("tokenizer.json", "tokenizer_config.json")
MAX_SEQUENCE_LENGTH: Final = 512


class TokenizerMissing(FileNotFoundError):
    """A text encoder whose tokenizer cannot be found (``looked`` lists where)."""

    def __init__(self, path: Path, looked: list[Path]) -> None:
        where = ", ".join(str(p) for p in looked)
        super().__init__(
            f"{path}: the text encoder's tokenizer was not found (looked in {where}). A single "
            "text-encoder file (such as the Comfy-Org qwen_3_4b.safetensors) carries no "
            f"tokenizer: put the Qwen3 tokenizer files ({', '.join(TOKENIZER_FILES)}, from "
            f"Tongyi-MAI/Z-Image-Turbo, folder tokenizer/) in text_encoders/{TOKENIZER_FOLDER}/ "
            "- `inline models pull alibaba/z-image-turbo` fetches them - or use an HF-format "
            "text-encoder folder that includes its tokenizer."
        )
        self.looked = looked


def _has_tokenizer(folder: Path) -> bool:
    return folder.is_dir() and any((folder / f).is_file() for f in TOKENIZER_FILES)


def tokenizer_candidates(path: Path) -> list[Path]:
    """Where the tokenizer of the text encoder at ``path`` may be, in order."""
    if path.is_dir():
        return [path, path / "tokenizer", path.parent / "tokenizer"]
    stem = path.name.split(".", 1)[0]
    found = [path.parent / f"{stem}_tokenizer"]
    if found[0].name != TOKENIZER_FOLDER:
        found.append(path.parent / TOKENIZER_FOLDER)
    return found


def find_tokenizer(path: Path) -> Path:
    """The tokenizer folder for the text encoder at ``path``; raises ``TokenizerMissing``."""
    candidates = tokenizer_candidates(path)
    for folder in candidates:
        if _has_tokenizer(folder):
            return folder
    raise TokenizerMissing(path, candidates)


def load_tokenizer(folder: Path) -> Any:
    """The tokenizer in ``folder`` (local files only)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


@dataclass
class TextEncoder:
    """A loaded text encoder and its tokenizer."""

    model: Any
    tokenizer: Any
    file: str
    device: str

    @property
    def hidden_size(self) -> int:
        """The width of its features (the transformer's ``cap_feat_dim`` must match)."""
        return int(self.model.config.hidden_size)


@dataclass
class Conditioning:
    """Encoded prompts: one feature tensor per prompt (only its real tokens), and the source."""

    embeds: list[Any]
    prompts: list[str]
    text_encoder: str

    def zeroed(self) -> Conditioning:
        """The same shapes, all zero (Z-Image's negative when none is wired)."""
        zeros = [e * 0 for e in self.embeds]
        return Conditioning(zeros, [""] * len(self.prompts), self.text_encoder)


def encode_prompts(te: TextEncoder, prompts: list[str]) -> Conditioning:
    """Encode like diffusers' ``ZImagePipeline._encode_prompt``, without autograd: the chat
    template with thinking enabled, padded to 512 tokens, features from ``hidden_states[-2]``,
    only the unmasked tokens kept. ``no_grad``, not inference mode, in every forward of this
    library: offload hooks move weights inside the forward, and int8 (torchao) weights moved
    under inference mode become inference tensors that cannot be parameters again."""

    texts = [
        te.tokenizer.apply_chat_template(
            [{"role": "user", "content": p}],
            tokenize=False,
            add_generation_prompt=True,
            enable_thinking=True,
        )
        for p in prompts
    ]
    return _encode(te, texts, prompts)


def _encode(te: TextEncoder, texts: list[str], prompts: list[str]) -> Conditioning:
    import torch

    with torch.no_grad():
        inputs = te.tokenizer(
            texts,
            padding="max_length",
            max_length=MAX_SEQUENCE_LENGTH,
            truncation=True,
            return_tensors="pt",
        )
        ids = inputs.input_ids.to(te.device)
        mask = inputs.attention_mask.to(te.device).bool()
        hidden = te.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        feats = hidden.hidden_states[-2]
        embeds = [feats[i][mask[i]] for i in range(len(feats))]
    return Conditioning(embeds, list(prompts), te.file)
