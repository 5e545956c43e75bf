"""Backbones: the embedded MiniLM offline, and the decoder path on a tiny config-built Qwen3."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fugu_cli.errors import ConfigError
from fugu_cli.router.backbone import load_backbone, tiny_qwen3_backbone
from tests.router.kit import minilm


def test_minilm_loads_offline_and_embeds_meaning() -> None:
    bb = minilm()
    assert (bb.id, bb.kind, bb.hidden_size) == ("minilm", "encoder", 384)
    vecs = bb.encode(
        [
            "user: the SQL query joining orders and customers is slow",
            "A database expert: SQL, indexes and query plans.",
            "A designer for CSS animations and web page colours.",
        ]
    )
    assert vecs.shape == (3, 384) and vecs.dtype == torch.float32
    assert torch.allclose(vecs.norm(dim=1), torch.ones(3), atol=1e-5)
    assert float(vecs[0] @ vecs[1]) > float(vecs[0] @ vecs[2]) + 0.1


def test_minilm_vector_is_the_masked_mean_and_does_not_depend_on_batch_padding() -> None:
    bb = minilm()
    short, long = "user: hi", "assistant: " + "read the file and run the tests again " * 6
    alone = bb.encode([short])[0]
    batched = bb.encode([short, long])[0]
    assert torch.allclose(alone, batched, atol=1e-5)
    ids = bb.tokenizer([short], return_tensors="pt")
    with torch.inference_mode():
        manual = bb.model(**ids).last_hidden_state[0].mean(0)
    assert torch.allclose(alone, F.normalize(manual, dim=0), atol=1e-5)


def test_tiny_qwen3_reads_the_second_to_last_token() -> None:
    bb = tiny_qwen3_backbone(seed=0)
    assert bb.kind == "decoder" and bb.hidden_size == 64
    texts = ["user: fix the flaky test", "tool: " + "FAILED tests/test_x.py::test_y AssertionError " * 4]
    got = bb.encode(texts)
    for text, vec in zip(texts, got, strict=True):
        ids = bb.tokenizer([text + "\n"], return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            hidden = bb.model(input_ids=ids).last_hidden_state[0]
        assert torch.allclose(vec, F.normalize(hidden[-2], dim=0), atol=1e-5)
        assert not torch.allclose(vec, F.normalize(hidden[-1], dim=0), atol=1e-3)


def test_tiny_qwen3_is_deterministic_per_seed() -> None:
    a, b, c = tiny_qwen3_backbone(seed=0), tiny_qwen3_backbone(seed=0), tiny_qwen3_backbone(seed=1)
    text = ["user: hello"]
    assert torch.equal(a.encode(text), b.encode(text))
    assert not torch.allclose(a.encode(text), c.encode(text))


def test_a_saved_decoder_directory_loads_as_a_decoder(tmp_path: Path) -> None:
    tiny = tiny_qwen3_backbone(seed=0)
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    loaded = load_backbone(str(tmp_path))
    assert loaded.kind == "decoder" and loaded.hidden_size == 64
    text = ["user: add a --json flag to the cli"]
    assert torch.allclose(loaded.encode(text), tiny.encode(text), atol=1e-5)


def test_an_unknown_backbone_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Cannot load router backbone"):
        load_backbone(str(tmp_path / "nothing-here"))
