"""Backbones: the embedded MiniLM offline, the decoder path on a tiny config-built Qwen3, and the tests' tiny
BERT."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fugu_cli.app import default_checkpoint
from fugu_cli.errors import ConfigError
from fugu_cli.router.backbone import (
    Backbone,
    load_backbone,
    minilm_path,
    tiny_bert_backbone,
    tiny_qwen3_backbone,
)
from fugu_cli.router.bert import BertEncoder
from fugu_cli.router.learned import LearnedRouter
from fugu_cli.types import Message, RouteState, ToolCall, Worker
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


def test_tiny_bert_is_an_encoder_deterministic_per_seed() -> None:
    texts = ["user: the SQL query is slow", "user: make the button blue"]
    a, b, other = (tiny_bert_backbone(seed).encode(texts) for seed in (0, 0, 1))
    assert (tiny_bert_backbone().kind, a.shape) == ("encoder", (2, 64))
    assert torch.equal(a, b) and not torch.allclose(a, other)
    assert torch.allclose(a.norm(dim=1), torch.ones(2), atol=1e-5)


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


def _transformers_minilm() -> Backbone:
    """The embedded MiniLM through transformers' own BertModel and tokenizer: what the router ran before
    bert.py, kept as the reference its numbers must match."""
    from transformers import AutoModel, AutoTokenizer

    path = minilm_path()
    model = AutoModel.from_pretrained(path).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return Backbone("minilm", "encoder", model, AutoTokenizer.from_pretrained(path), 384)


TEXTS = [
    "user: hi",
    "assistant: " + "read the file and run the tests again " * 40,  # cut at every token limit
    "tool: Ünïcode 日本語 tabs\tand\nnewlines, emoji 🐡 and CamelCaseIdentifiers_with_underscores",
    "",
]


@pytest.mark.parametrize("max_length", [16, 64, 128, 256])
def test_minilm_without_transformers_gives_transformers_numbers(max_length: int) -> None:
    native, reference = minilm(), _transformers_minilm()
    assert isinstance(native.model, BertEncoder)
    cut = {"padding": True, "truncation": True, "max_length": max_length}
    ids = native.tokenizer(TEXTS, **cut)
    want = reference.tokenizer(TEXTS, **cut, return_tensors="pt")
    assert torch.equal(ids["input_ids"], want["input_ids"])
    assert torch.equal(ids["attention_mask"], want["attention_mask"])
    got, ref = native.encode(TEXTS, max_length=max_length), reference.encode(TEXTS, max_length=max_length)
    assert (got - ref).abs().max() < 1e-5


def test_the_shipped_checkpoint_scores_as_it_did_with_transformers() -> None:
    """FEATURES_VERSION is unchanged, so the shipped router must choose and score exactly as before."""
    pool = [
        Worker("claude-sonnet", "anthropic/claude-sonnet-4-5-20250929", price_in=3.0, price_out=15.0),
        Worker("gpt-5", "openai/gpt-5", price_in=1.25, price_out=10.0),
        Worker("gpt-5-mini", "openai/gpt-5-mini", price_in=0.25, price_out=2.0),
        Worker("newcomer", "openai/newcomer", description="A careful reviewer of Python test suites."),
    ]
    native = LearnedRouter.load(default_checkpoint())
    before = LearnedRouter.load(default_checkpoint(), backbone=_transformers_minilm())
    call = ToolCall("c1", "shell", '{"command": "pytest -q"}')
    transcripts = [
        [Message("user", "fix the failing test in calc.py")],
        [Message("user", "write a SQL migration adding an index"), Message("assistant", "on it", (call,))],
        [
            Message("user", "port utils.py to pathlib"),
            Message("assistant", None, (call,), worker="gpt-5"),
            Message("tool", "FAILED test_utils.py::test_join - AssertionError\n" * 30, tool_call_id="c1"),
        ],
    ]
    for messages in transcripts:
        state = RouteState(messages=tuple(messages), step=len(messages), last_worker="gpt-5")
        got, want = native.utilities(state, pool), before.utilities(state, pool)
        assert abs(got - want).max() < 1e-4
        assert native.pick(state, pool).worker == before.pick(state, pool).worker


def test_loading_the_default_backbone_imports_no_transformers() -> None:
    """Neither the embedded MiniLM nor the tests' tiny BERT (the executor tests load it in each process)."""
    code = (
        "import sys\n"
        "from fugu_cli.router.backbone import load_backbone\n"
        "for spec in ('minilm', 'tiny-bert'):\n"
        "    load_backbone(spec).encode(['user: hello'])\n"
        "print(sorted(m for m in ('transformers', 'scipy', 'sympy') if m in sys.modules))\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_backbone_that_needs_transformers_says_how_to_get_it(tmp_path: Path) -> None:
    """transformers is an optional extra: without it, the embedded MiniLM still loads, and a checkpoint on
    another backbone fails with a line saying what to install."""
    model = tmp_path / "qwen-like"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3", "hidden_size": 64}')
    code = (
        "import sys\n"
        "sys.modules['transformers'] = None  # as in an install without the extra\n"
        "from fugu_cli.errors import ConfigError\n"
        "from fugu_cli.router.backbone import load_backbone\n"
        "load_backbone('minilm').encode(['user: hello'])\n"
        "try:\n"
        f"    load_backbone({str(model)!r})\n"
        "except ConfigError as e:\n"
        "    print(e)\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "needs transformers" in out.stdout and "fugu-cli[transformers]" in out.stdout
