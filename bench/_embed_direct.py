"""The encoder bench/embed.py times, and its baseline: plain transformers in one process.

``python _embed_direct.py build OUT`` writes a small random sentence-transformers folder (the
shape of all-MiniLM-L6-v2: 6 layers, 384 wide, 12 heads; mean pooling, normalised, 128 tokens at
most) to ``OUT``. ``python _embed_direct.py serve FOLDER`` prints ``{"ready": true}``, then
reads one JSON list of texts per stdin line and prints one JSON line per list: ``{"s"}``, the
seconds from the texts to their normalised mean-pooled vectors as Python lists (what a server
hands back), with ``AutoModel`` and the folder's tokenizer, as a script would.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

#: The words of the bench's texts (and of the tokenizer's vocabulary).
WORDS = (
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "a", "cat", "sleeps", "on",
    "warm", "mat", "embeddings", "map", "texts", "to", "vectors", "sea", "is", "calm", "and",
    "sky", "blue", "what", "weather", "in", "paris", "today", "hello", "there", "how", "are",
    "you", "close", "together", "mean", "similar", "dogs", "cats", "friends", "search", "query",
    "document", "answer", "question",
)  # fmt: skip


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator([" ".join(WORDS)] * 8, trainers.WordPieceTrainer(
        vocab_size=2000, special_tokens=specials))  # fmt: skip
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_max_length=512,
    )  # fmt: skip
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(fast), hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
        intermediate_size=1536, max_position_embeddings=512,
    )  # fmt: skip
    BertModel(config, add_pooling_layer=False).save_pretrained(str(out))
    fast.save_pretrained(str(out))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ]  # fmt: skip
    (out / "modules.json").write_text(json.dumps(modules))
    (out / "1_Pooling").mkdir()
    (out / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True})
    )
    (out / "2_Normalize").mkdir()
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))


def serve(folder: str) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True).eval()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        texts = json.loads(line)
        started = time.perf_counter()
        batch = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
        with torch.inference_mode():
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            vectors = torch.nn.functional.normalize(pooled, p=2, dim=-1).tolist()
        elapsed = time.perf_counter() - started
        print(json.dumps({"s": elapsed, "n": len(vectors)}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(Path(sys.argv[2]))
    else:
        serve(sys.argv[2])
