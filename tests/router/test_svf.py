"""SVF: zero offsets change nothing, offsets keep the sum of singular values, state round-trips and merges."""

from __future__ import annotations

import pytest
import torch

from fugu_cli.router.backbone import tiny_qwen3_backbone
from fugu_cli.router.svf import apply_svf, resolve_targets
from tests.router.kit import minilm

TEXTS = ["user: fix the failing test", "tool: 3 passed, 1 failed in 0.21s", "assistant: done"]


def _randomise(params: list[torch.nn.Parameter], seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.copy_(0.3 * torch.randn(p.shape, generator=gen))


def test_zero_offsets_give_identical_outputs_on_minilm() -> None:
    bb = minilm()
    before = bb.encode(TEXTS)
    last = resolve_targets(bb.model, ["last:1"])
    assert len(last) == 6 and all(n.startswith("encoder.layer.5.") for n in last)
    state = apply_svf(bb.model, ["encoder.layer.5.attention.self.[qv]*"])
    try:
        assert state.targets == [f"encoder.layer.5.attention.self.{n}" for n in ("query", "value")]
        assert sum(p.numel() for p in state.parameters()) == 2 * 384
        assert torch.equal(bb.encode(TEXTS), before)
        _randomise(list(state.parameters()))
        assert not torch.allclose(bb.encode(TEXTS), before, atol=1e-4)
    finally:
        state.remove()  # the cached MiniLM is shared with other tests
    assert torch.equal(bb.encode(TEXTS), before)


def test_offsets_keep_the_sum_of_singular_values_and_change_the_output() -> None:
    bb = tiny_qwen3_backbone(seed=0)
    before = bb.encode(TEXTS)
    q = bb.model.layers[1].self_attn.q_proj
    sigma = torch.linalg.svdvals(q.weight.detach())
    state = apply_svf(bb.model, ["last:1"])
    assert all(n.startswith("layers.1.") for n in state.targets) and len(state.targets) == 7
    _randomise(list(state.parameters()))
    new_sigma = torch.linalg.svdvals(q.weight.detach())
    assert torch.isclose(new_sigma.sum(), sigma.sum(), rtol=1e-4)
    assert not torch.allclose(new_sigma, sigma, rtol=1e-3)
    assert not torch.allclose(bb.encode(TEXTS), before, atol=1e-4)


def test_state_round_trips_and_merging_keeps_the_outputs() -> None:
    a, b = tiny_qwen3_backbone(seed=0), tiny_qwen3_backbone(seed=0)
    sa, sb = apply_svf(a.model, ["last:2"]), apply_svf(b.model, ["last:2"])
    _randomise(list(sa.parameters()), seed=1)
    sb.load_state_dict(sa.state_dict())
    trained = a.encode(TEXTS)
    assert torch.equal(b.encode(TEXTS), trained)
    sb.merge()
    assert not any("parametrizations" in n for n, _ in b.model.named_modules())
    assert torch.allclose(b.encode(TEXTS), trained, atol=1e-6)


def test_gradients_reach_the_offsets_and_nothing_else() -> None:
    bb = tiny_qwen3_backbone(seed=0)
    state = apply_svf(bb.model, ["layers.0.mlp.*"])
    bb.encode(TEXTS, grad=True).sum().backward()
    grads = [p.grad for p in state.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)
    frozen = [p for n, p in bb.model.named_parameters() if not n.endswith("delta")]
    assert all(p.grad is None for p in frozen)


def test_unknown_target_is_refused() -> None:
    with pytest.raises(ValueError, match="matches no linear layer"):
        apply_svf(tiny_qwen3_backbone().model, ["encoder.layer.99.*"])
