"""The selection head: shapes, size, the identity term only for known workers, role logits."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fugu_cli.router.head import HeadConfig, SelectionHead


def _head(n_known: int = 2, n_roles: int = 0, seed: int = 0) -> SelectionHead:
    torch.manual_seed(seed)
    head = SelectionHead(HeadConfig(hidden=384, desc_dim=384, n_roles=n_roles, n_known=n_known))
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.1 * torch.randn_like(p))
    head.eval()
    return head


def _unit(*shape: int) -> torch.Tensor:
    return F.normalize(torch.randn(*shape), dim=-1)


def test_about_ten_thousand_parameters_and_logit_shapes() -> None:
    head = _head(n_known=4, n_roles=3)
    assert 8_000 <= head.n_params() <= 12_000
    h, desc = _unit(5, 384), _unit(4, 384)
    assert head(h, desc).shape == (5, 4)
    assert head.role_logits(h).shape == (5, 3)


def test_unseen_workers_are_scored_from_descriptions_without_an_identity_term() -> None:
    head = _head(n_known=2)
    with torch.no_grad():
        head.known_bias[0] = 7.0
    h, desc = _unit(3, 384), _unit(2, 384)
    known = head(h, desc, known=torch.tensor([0, 1]))
    same_desc_unseen = head(h, desc, known=torch.tensor([-1, 1]))
    assert torch.allclose(known[:, 1], same_desc_unseen[:, 1])
    assert torch.all(known[:, 0] > same_desc_unseen[:, 0] + 6.0)
    bare = SelectionHead(HeadConfig(hidden=384, desc_dim=384, n_known=0))
    bare.load_state_dict(
        {k: v for k, v in head.state_dict().items() if not k.startswith("known_")}, strict=False
    )
    assert torch.allclose(bare(h, desc)[:, 0], same_desc_unseen[:, 0], atol=1e-6)


def test_known_none_means_the_columns_are_the_known_workers_in_order() -> None:
    head = _head(n_known=3)
    h, desc = _unit(2, 384), _unit(3, 384)
    assert torch.equal(head(h, desc), head(h, desc, known=torch.arange(3)))


def test_the_similarity_term_prefers_the_matching_description_when_untrained() -> None:
    head = SelectionHead(HeadConfig(hidden=384, desc_dim=384, n_known=0))
    with torch.no_grad():
        head.A.zero_()
    desc = _unit(3, 384)
    logits = head(desc[[2, 0]], desc)
    assert logits.argmax(1).tolist() == [2, 0]


def test_worker_bias_masks() -> None:
    head = _head(n_known=2)
    h, desc = _unit(4, 384), _unit(2, 384)
    logits = head(h, desc, torch.tensor([0.0, -math.inf]))
    assert logits.argmax(1).tolist() == [0, 0, 0, 0]
    assert torch.softmax(logits, 1)[:, 1].eq(0).all()


def test_role_logits_need_a_role_head() -> None:
    with pytest.raises(ValueError, match="no role logits"):
        _head(n_roles=0).role_logits(_unit(1, 384))
