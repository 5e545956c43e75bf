"""SVF: one learnable scale per singular value of selected nn.Linear weights (DESIGN §4).

W = U diag(σ) Vᵀ becomes U diag(σ') Vᵀ with σ' = σ·(1+δ)·Σσ/Σσ(1+δ), so the sum of singular values is
unchanged; U, V and everything else stay frozen. Zero offsets give the original weight bit for bit.
Imports torch: import lazily.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Sequence

import torch
from torch import nn
from torch.nn.utils import parametrize


class _SVFWeight(nn.Module):  # type: ignore[misc]
    """Parametrization: W ↦ W + U diag(σ' − σ) Vᵀ (equal to U diag(σ') Vᵀ, and exactly W when δ = 0)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # MKL's threaded SVD spins for seconds on a busy machine; 1 thread: ~40 ms
        try:
            u, s, vh = torch.linalg.svd(weight.detach().float(), full_matrices=False)
        finally:
            torch.set_num_threads(threads)
        self.register_buffer("u", u)  # [out, k]
        self.register_buffer("s", s)  # [k]
        self.register_buffer("vh", vh)  # [k, in]
        self.delta = nn.Parameter(torch.zeros_like(s))  # [k]

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        scaled = self.s * (1.0 + self.delta)
        scaled = scaled * (self.s.sum() / scaled.sum())
        change = (self.u * (scaled - self.s)) @ self.vh  # [out, in]
        return weight + change.to(weight.dtype)


class SVFState:
    """The SVF offsets attached to one model, by module name."""

    def __init__(self, model: nn.Module, params: dict[str, _SVFWeight]) -> None:
        self.model = model
        self.params = params

    @property
    def targets(self) -> list[str]:
        return list(self.params)

    def parameters(self) -> Iterator[nn.Parameter]:
        for p in self.params.values():
            yield p.delta

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: p.delta.detach().clone() for name, p in self.params.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if set(state) != set(self.params):
            raise ValueError(f"SVF targets differ: {sorted(state)} vs {sorted(self.params)}")
        with torch.no_grad():
            for name, p in self.params.items():
                p.delta.copy_(state[name])

    def merge(self) -> None:
        """Bake the scaled weights in and drop the parametrization: inference pays nothing for SVF."""
        self._drop(keep=True)

    def remove(self) -> None:
        """Drop the parametrization and restore the original weights."""
        self._drop(keep=False)

    def _drop(self, *, keep: bool) -> None:
        modules = dict(self.model.named_modules())
        for name in self.params:
            parametrize.remove_parametrizations(modules[name], "weight", leave_parametrized=keep)
            modules[name].weight.requires_grad_(False)
        self.params = {}


def apply_svf(model: nn.Module, targets: Sequence[str]) -> SVFState:
    """Attach SVF to the nn.Linear modules named by `targets`: fnmatch patterns on module names
    ("encoder.layer.5.attention.self.*") or "last:N" (every linear layer of the model's last N blocks)."""
    names = resolve_targets(model, targets)
    params: dict[str, _SVFWeight] = {}
    modules = dict(model.named_modules())
    for name in names:
        param = _SVFWeight(modules[name].weight)
        parametrize.register_parametrization(modules[name], "weight", param, unsafe=True)
        params[name] = param
    return SVFState(model, params)


def resolve_targets(model: nn.Module, targets: Sequence[str]) -> list[str]:
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    chosen: list[str] = []
    for pattern in targets:
        if pattern.startswith("last:"):
            prefixes = [f"{b}." for b in _blocks(model)[-int(pattern[5:]) :]]
            hits = [n for n in linears if n.startswith(tuple(prefixes))]
        else:
            hits = [n for n in linears if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise ValueError(f"SVF target {pattern!r} matches no linear layer")
        chosen += [n for n in hits if n not in chosen]
    return chosen


def _blocks(model: nn.Module) -> list[str]:
    """Names of the transformer blocks: the children of the longest ModuleList."""
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        raise ValueError("model has no ModuleList of blocks for an SVF 'last:N' target")
    name, blocks = max(lists, key=lambda nm: len(nm[1]))
    return [f"{name}.{i}" if name else str(i) for i in range(len(blocks))]
