"""Attack fixtures: the tool fixtures (a real repo, a context, `call`), and the sandbox default put back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fugu_cli.tools import sandbox
from tests.tools.conftest import call, make_ctx, repo

__all__ = ["call", "make_ctx", "repo"]


@pytest.fixture(autouse=True)
def _default_sandbox() -> Iterator[None]:
    before = sandbox.default_policy()
    yield
    sandbox.set_default_policy(before)
