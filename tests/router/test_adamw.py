"""fugu's AdamW (no torch.optim, whose first use imports torch._dynamo) gives torch.optim.AdamW's weights bit
for bit: the head's single group with weight decay, and SVF's two groups with their own learning rates."""

from __future__ import annotations

import copy

import torch

from fugu_cli.router.adamw import AdamW


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer | AdamW, steps: int) -> None:
    gen = torch.Generator().manual_seed(1)
    for i in range(steps):
        x = torch.randn(5, 8, generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if i == 3:  # a parameter without a gradient this step is left alone, its state with it
            model[2].bias.grad = None
        opt.step()


def test_one_group_with_weight_decay_matches_torch_bit_for_bit() -> None:
    ours, theirs = _model(), _model()
    _train(ours, AdamW(ours.parameters(), lr=3e-3, weight_decay=0.05), 40)
    _train(theirs, torch.optim.AdamW(theirs.parameters(), lr=3e-3, weight_decay=0.05), 40)
    before = _model()
    for a, b, c in zip(ours.parameters(), theirs.parameters(), before.parameters(), strict=True):
        assert torch.equal(a, b)
        assert not torch.equal(a, c)  # it trained


def test_groups_with_their_own_rates_match_torch_bit_for_bit() -> None:
    ours, theirs = _model(), copy.deepcopy(_model())

    def groups(m: torch.nn.Module) -> list[dict[str, object]]:
        return [
            {"params": list(m[0].parameters()), "lr": 1e-4},
            {"params": list(m[2].parameters()), "lr": 1e-2},
        ]

    _train(ours, AdamW(groups(ours), weight_decay=0.0), 25)
    _train(theirs, torch.optim.AdamW(groups(theirs), weight_decay=0.0), 25)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)
