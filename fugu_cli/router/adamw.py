"""AdamW as `torch.optim.AdamW` computes it on the CPU, without `torch.optim`.

torch's optimizers import `torch._dynamo` (and with it sympy) the first time one is built or stepped, about
2 s of CPU on a 2-core machine, before a router's first training step; the head and the SVF scales train
for a second or two. This is the same arithmetic as torch's single-tensor AdamW, the algorithm it uses for
CPU tensors (no foreach or fused kernels there), in the same order of operations, so the weights it gives
are bit for bit torch's (tests/router/test_adamw.py steps both side by side).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch


class AdamW:
    """`torch.optim.AdamW(params, lr, betas, eps, weight_decay)` for CPU tensors; `params` is tensors or
    parameter groups (dicts with "params" and, optionally, their own "lr" and "weight_decay")."""

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[Mapping[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        given = list(params)
        groups: list[Mapping[str, Any]] = (
            [{"params": given}] if given and not isinstance(given[0], Mapping) else given  # type: ignore[list-item]
        )
        self.groups = [
            {"lr": lr, "weight_decay": weight_decay, **g, "params": list(g["params"])} for g in groups
        ]
        self.betas = betas
        self.eps = eps
        # per parameter: [step, exp_avg, exp_avg_sq], made at its first step with a gradient, as torch does
        self.state: dict[torch.Tensor, list[Any]] = {}

    def zero_grad(self) -> None:
        """As torch's default (set_to_none=True)."""
        for group in self.groups:
            for p in group["params"]:
                p.grad = None

    def step(self) -> None:
        with torch.no_grad():
            self._step()

    def _step(self) -> None:
        beta1, beta2 = self.betas
        for group in self.groups:
            lr, weight_decay = float(group["lr"]), float(group["weight_decay"])
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                state = self.state.get(p)
                if state is None:
                    zeros = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state = self.state[p] = [0.0, zeros, zeros.clone()]
                state[0] += 1.0
                step, exp_avg, exp_avg_sq = state
                if weight_decay != 0:
                    p.mul_(1 - lr * weight_decay)
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                bias_correction1 = 1 - beta1**step
                bias_correction2 = 1 - beta2**step
                step_size = lr / bias_correction1
                denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(self.eps)
                p.addcdiv_(exp_avg, denom, value=-step_size)
