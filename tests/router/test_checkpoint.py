"""Checkpoints: a round trip gives identical scores; the JSON is readable without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fugu_cli.errors import ConfigError
from fugu_cli.router.backbone import tiny_qwen3_backbone
from fugu_cli.router.checkpoint import (
    CheckpointWorker,
    RouterCheckpoint,
    init_checkpoint,
    load_checkpoint,
    read_meta,
    save_checkpoint,
)
from fugu_cli.router.head import HeadConfig, SelectionHead
from fugu_cli.router.learned import LearnedRouter
from fugu_cli.router.svf import apply_svf
from fugu_cli.types import Message, RouteState, Worker
from tests.router.kit import minilm, user, worker

TRANSCRIPTS = [
    user("add a --json flag to the cli"),
    [
        Message(role="user", content="the SQL migration fails"),
        Message(role="assistant", content="", tool_calls=(), worker="a"),
        Message(role="tool", content="ERROR: column users.email does not exist", tool_call_id="1"),
    ],
]


def _pool() -> list[Worker]:
    return [
        Worker("a", "openai/a", description="careful planner"),
        Worker("b", "openai/b", description="fast coder"),
    ]


def test_round_trip_with_svf_on_a_decoder_gives_identical_scores(tmp_path: Path) -> None:
    bb = tiny_qwen3_backbone(seed=0)
    svf = apply_svf(bb.model, ["last:1"])
    torch.manual_seed(3)
    with torch.no_grad():
        for p in svf.parameters():
            p.copy_(0.2 * torch.randn_like(p))
    head = SelectionHead(HeadConfig(hidden=64, desc_dim=64, rank=4, n_roles=3, n_known=2))
    with torch.no_grad():
        head.known_bias.copy_(torch.tensor([0.3, -0.2]))
        head.known_emb.normal_()
    meta = RouterCheckpoint(
        backbone="tiny-qwen3",
        workers=(CheckpointWorker("a", "careful planner"), CheckpointWorker("b", "fast coder")),
        head={},
        tau=0.5,
        training={"data": "synthetic"},
        metrics={"reward": 0.71},
    )
    saved = save_checkpoint(tmp_path / "ckpt", head, svf, meta)
    assert saved.roles and saved.svf_targets == tuple(svf.targets)

    live = LearnedRouter(bb, head, saved)
    loaded = LearnedRouter.load(tmp_path / "ckpt", threads=1)
    for messages in TRANSCRIPTS:
        state = RouteState(messages=messages, step=0)
        assert torch.equal(loaded.logits(state, _pool()), live.logits(state, _pool()))
        a, b = loaded.pick(state, _pool()), live.pick(state, _pool())
        assert (a.worker, dict(a.scores), a.role) == (b.worker, dict(b.scores), b.role)
        assert a.role in ("thinker", "worker", "verifier")


def test_init_checkpoint_round_trips_on_minilm(tmp_path: Path) -> None:
    pool = [worker("sql"), worker("web")]
    meta = init_checkpoint(tmp_path / "c", pool, bias={"web-pro": 0.5})
    got_meta, head_state, svf_state = load_checkpoint(tmp_path / "c")
    assert got_meta == meta and svf_state is None
    assert head_state["known_bias"].tolist() == [0.0, 0.5]
    on_disk = json.loads((tmp_path / "c" / "router.json").read_text())
    assert on_disk["backbone"] == "minilm" and on_disk["roles"] is False
    assert [w["name"] for w in on_disk["workers"]] == ["sql-pro", "web-pro"]
    assert on_disk["workers"][0]["model"] == "openai/sql-model"

    router = LearnedRouter.load(tmp_path / "c", threads=1)
    state = RouteState(messages=user("speed up the slow SELECT with an index"), step=0)
    assert router.pick(state, pool).worker == "sql-pro"
    rebuilt = LearnedRouter(minilm(), router.head, got_meta)
    assert torch.equal(rebuilt.logits(state, pool), router.logits(state, pool))


def test_info_reads_the_json_without_importing_torch(tmp_path: Path) -> None:
    init_checkpoint(tmp_path / "c", [worker("sql"), worker("web")], backbone="tiny-qwen3", roles=True)
    code = (
        "import sys; from pathlib import Path; from fugu_cli.router.checkpoint import info_text; "
        f"print(info_text(Path({str(tmp_path / 'c')!r}))); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.rstrip().endswith("False")
    assert "backbone     tiny-qwen3" in out and "roles yes" in out
    assert "sql-pro (openai/sql-model): Database specialist" in out
    assert '"kind": "untrained"' not in out and 'kind: "untrained"' in out


def test_a_checkpoint_with_other_features_is_refused(tmp_path: Path) -> None:
    init_checkpoint(tmp_path / "c", [worker("sql")], backbone="tiny-qwen3")
    meta = json.loads((tmp_path / "c" / "router.json").read_text())
    (tmp_path / "c" / "router.json").write_text(json.dumps({**meta, "features": "whole-transcript/v9"}))
    with pytest.raises(ConfigError, match="whole-transcript/v9"):
        LearnedRouter.load(tmp_path / "c", threads=1)


def test_a_missing_checkpoint_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a router checkpoint"):
        read_meta(tmp_path)
    (tmp_path / "router.json").write_text(json.dumps({"backbone": "minilm", "workers": [], "head": {}}))
    with pytest.raises(ConfigError, match=r"router\.safetensors is missing"):
        load_checkpoint(tmp_path)
