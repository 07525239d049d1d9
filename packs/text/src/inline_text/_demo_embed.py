"""Tiny text encoders with random weights, built locally (no download): what ``inline demo
models`` writes for ``text/embed`` and what the embedding tests run on. Run in the text pack's
venv. All share a WordPiece tokenizer trained here (``tokenizer()``), 64 positions:

- ``build_st``: a sentence-transformers folder in the classic layout (what most of the Hub
  holds): the ``BertModel`` at the root, ``modules.json`` (Transformer, Pooling, Normalize),
  ``1_Pooling/config.json`` with the older ``pooling_mode_*_tokens`` flags (mean),
  ``2_Normalize/``, ``sentence_bert_config.json`` (``max_seq_length`` 32: longer texts are cut);
- ``build_dense``: the layout of sentence-transformers 5+ (``pooling_mode: "cls"``) with a
  ``2_Dense`` layer (32 -> 16, Tanh) and no Normalize;
- ``build_plain``: a plain transformers folder (no sentence-transformers files: mean pooling,
  not normalised).

Each returns its parameter count.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

SEED = 4321
CORPUS = [
    "the quick brown fox jumps over the lazy dog", "a cat sleeps on the warm mat",
    "embeddings map texts to vectors", "the sea is calm and the sky is blue",
    "what is the weather in paris today", "hello there, how are you today?",
    "vectors close together mean similar texts", "dogs and cats are friends",
]  # fmt: skip
ST_TYPES = "sentence_transformers.models"


def tokenizer():  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=specials)
    tok.train_from_iterator(CORPUS * 4, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )  # fmt: skip
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_max_length=64,
    )  # fmt: skip


def bert(folder: Path, fast, seed: int) -> int:  # type: ignore[no-untyped-def]
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(fast), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, pad_token_id=fast.pad_token_id,
    )  # fmt: skip
    model = BertModel(config, add_pooling_layer=False).eval()
    model.save_pretrained(str(folder))
    fast.save_pretrained(str(folder))
    return sum(p.numel() for p in model.parameters())


def write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def build_st(st: Path, fast, seed: int = SEED) -> int:  # type: ignore[no-untyped-def]
    """The classic sentence-transformers layout: mean pooling, normalised, texts cut to 32."""
    count = bert(st, fast, seed)
    write(st / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": f"{ST_TYPES}.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": f"{ST_TYPES}.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": f"{ST_TYPES}.Normalize"},
    ])  # fmt: skip
    write(st / "1_Pooling" / "config.json", {
        "word_embedding_dimension": 32, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True,
    })  # fmt: skip
    (st / "2_Normalize").mkdir(exist_ok=True)
    write(st / "sentence_bert_config.json", {"max_seq_length": 32, "do_lower_case": False})
    write(st / "config_sentence_transformers.json", {
        "__version__": {"sentence_transformers": "2.7.0"}, "prompts": {},
        "default_prompt_name": None, "similarity_fn_name": "cosine",
    })  # fmt: skip
    return count


def build_dense(dense: Path, fast, seed: int = SEED + 1) -> int:  # type: ignore[no-untyped-def]
    """The sentence-transformers 5+ layout: CLS pooling, then a Dense layer (32 -> 16, Tanh)."""
    count = bert(dense, fast, seed)
    write(dense / "modules.json", [
        {"idx": 0, "name": "0", "path": "",
         "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense",
         "type": "sentence_transformers.base.modules.dense.Dense"},
    ])  # fmt: skip
    write(dense / "1_Pooling" / "config.json",
          {"embedding_dimension": 32, "pooling_mode": "cls", "include_prompt": True})  # fmt: skip
    write(dense / "2_Dense" / "config.json", {
        "in_features": 32, "out_features": 16, "bias": True,
        "activation_function": "torch.nn.modules.activation.Tanh",
    })  # fmt: skip
    torch.manual_seed(seed + 1)
    linear = torch.nn.Linear(32, 16)
    from safetensors.torch import save_file

    save_file({f"linear.{k}": v.contiguous() for k, v in linear.state_dict().items()},
              str(dense / "2_Dense" / "model.safetensors"))  # fmt: skip
    return count


def build_plain(folder: Path, fast, seed: int = SEED + 3) -> int:  # type: ignore[no-untyped-def]
    """A plain transformers folder: mean pooling, not normalised."""
    return bert(folder, fast, seed)
