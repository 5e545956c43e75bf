"""A BERT encoder in plain torch: what the router's default backbone (all-MiniLM-L6-v2) runs, without
importing transformers (whose import alone takes seconds and drags in scipy and sympy).

Module and parameter names are transformers' `BertModel`'s, so its safetensors load as they are, SVF targets
("encoder.layer.5.attention.self.*", "last:1") name the same layers, and block hooks see the same blocks.
The numbers equal `BertModel`'s (tests/router/test_backbone.py compares them). Imports torch: import lazily.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BertConfig:
    """The fields of a BERT `config.json` that the forward pass reads."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BertConfig:
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in fields})


def is_bert(config: dict[str, Any]) -> bool:
    """Whether a transformers `config.json` describes a plain BERT encoder this module can run."""
    return (
        config.get("model_type") == "bert"
        and config.get("hidden_act", "gelu") == "gelu"
        and config.get("position_embedding_type", "absolute") == "absolute"
        and not config.get("is_decoder", False)
    )


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor  # [N, T, H]


# Every weight comes from the file, so random initialisation (a fifth of a second for MiniLM) is skipped; the
# meta device would skip it too, but its first use imports a second's worth of torch.
class _Linear(nn.Linear):  # type: ignore[misc]
    def reset_parameters(self) -> None:
        pass


class _Embedding(nn.Embedding):  # type: ignore[misc]
    def reset_parameters(self) -> None:
        pass


class _Embeddings(nn.Module):  # type: ignore[misc]
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = _Embedding(c.vocab_size, c.hidden_size, padding_idx=c.pad_token_id)
        self.position_embeddings = _Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = _Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # [N, T] -> [N, T, H]
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        x = x + self.token_type_embeddings.weight[0]  # one segment: type id 0 everywhere
        out: torch.Tensor = self.LayerNorm(x)
        return out


class _SelfAttention(nn.Module):  # type: ignore[misc]
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.heads = c.num_attention_heads
        self.query = _Linear(c.hidden_size, c.hidden_size)
        self.key = _Linear(c.hidden_size, c.hidden_size)
        self.value = _Linear(c.hidden_size, c.hidden_size)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:  # [N, T, H], [N, 1, 1, T]
        n, t, h = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:  # [N, T, H] -> [N, heads, T, H / heads]
            return y.view(n, t, self.heads, h // self.heads).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # [N, heads, T, H / heads]
        return out.transpose(1, 2).reshape(n, t, h)


class _DenseNorm(nn.Module):  # type: ignore[misc]
    """Linear, then the residual, then LayerNorm (BERT's `SelfOutput` and `Output`)."""

    def __init__(self, d_in: int, c: BertConfig) -> None:
        super().__init__()
        self.dense = _Linear(d_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.LayerNorm(self.dense(x) + residual)
        return out


class _Attention(nn.Module):  # type: ignore[misc]
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _DenseNorm(c.hidden_size, c)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.output(self.self(x, bias), x)
        return out


class _Intermediate(nn.Module):  # type: ignore[misc]
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.dense = _Linear(c.hidden_size, c.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):  # type: ignore[misc]
    """One transformer block: `layer(hidden [N, T, H], bias [N, 1, 1, T]) -> hidden`."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _DenseNorm(c.intermediate_size, c)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        a = self.attention(x, bias)
        out: torch.Tensor = self.output(self.intermediate(a), a)
        return out


class _Layers(nn.Module):  # type: ignore[misc]
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(c) for _ in range(c.num_hidden_layers))


class BertEncoder(nn.Module):  # type: ignore[misc]
    """`model(input_ids=[N, T], attention_mask=[N, T]).last_hidden_state -> [N, T, H]`, as `BertModel`."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Layers(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> EncoderOutput:
        x = self.embeddings(input_ids)
        # padded keys get the most negative value the dtype holds, as transformers does
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.encoder.layer:
            x = layer(x, bias)
        return EncoderOutput(x)


class Tokenizer:
    """A directory's `tokenizer.json` through the `tokenizers` library, called the way transformers'
    tokenizers are: `tokenizer(texts, padding=True, truncation=True, max_length=N, return_tensors="pt")`."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as Fast

        self.fast = Fast.from_file(str(path / "tokenizer.json"))
        pad_id = self.fast.token_to_id("[PAD]") or 0
        self.fast.no_truncation()
        self.fast.enable_padding(pad_id=pad_id, pad_token="[PAD]")  # to the longest row, on the right

    def __len__(self) -> int:
        return int(self.fast.get_vocab_size(with_added_tokens=True))

    def __call__(
        self,
        texts: list[str],
        *,
        padding: bool = True,
        truncation: bool = False,
        max_length: int | None = None,
        return_tensors: str = "pt",
    ) -> dict[str, torch.Tensor]:
        """[N, T] `input_ids` and `attention_mask`, padded on the right to the longest row."""
        if truncation and max_length:
            self.fast.enable_truncation(max_length)
        else:
            self.fast.no_truncation()
        rows = self.fast.encode_batch(list(texts))
        ids = torch.tensor([r.ids for r in rows], dtype=torch.long)
        mask = torch.tensor([r.attention_mask for r in rows], dtype=torch.long)
        return {"input_ids": ids, "attention_mask": mask}


def is_bert_dir(path: Path) -> bool:
    """A directory this module can load: a BERT `config.json`, `tokenizer.json` and `model.safetensors`."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return is_bert(config) and (path / "tokenizer.json").is_file() and (path / "model.safetensors").is_file()


def load_bert(path: Path) -> tuple[BertEncoder, Tokenizer, int]:
    """The encoder and tokenizer of a BERT directory (`is_bert_dir`), and its hidden size."""
    from safetensors.torch import load_file

    config = BertConfig.from_dict(json.loads((path / "config.json").read_text()))
    model = BertEncoder(config)
    state = load_file(str(path / "model.safetensors"))
    state = {k: v for k, v in state.items() if not k.startswith("pooler.") and not k.endswith("position_ids")}
    model.load_state_dict(state, strict=True, assign=True)
    return model, Tokenizer(path), config.hidden_size
