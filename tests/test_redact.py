"""The redactor remembers the secrets of the environment it last read (it runs on every stored message), and
sees at once a secret that appears, changes or is registered after that."""

from __future__ import annotations

import pytest

from fugu_cli.redact import redact, register_secret_env, register_secret_values


def test_a_secret_set_changed_or_registered_later_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FUGU_TEST_TOKEN", raising=False)
    text = "token hunter2-alpha and hunter3-beta, in the clear: xyzzy-plover"
    assert redact(text) == text
    monkeypatch.setenv("FUGU_TEST_TOKEN", "hunter2-alpha")
    assert redact(text) == "token [FUGU_TEST_TOKEN] and hunter3-beta, in the clear: xyzzy-plover"
    monkeypatch.setenv("FUGU_TEST_TOKEN", "hunter3-beta")
    assert redact(text) == "token hunter2-alpha and [FUGU_TEST_TOKEN], in the clear: xyzzy-plover"
    monkeypatch.setenv("FUGU_TEST_PLAIN", "xyzzy-plover")  # not a secret-like name...
    assert redact(text).endswith("in the clear: xyzzy-plover")
    register_secret_env(["FUGU_TEST_PLAIN"])  # ...until a pool names it as its key
    assert redact(text).endswith("in the clear: [FUGU_TEST_PLAIN]")
    assert redact(text, {"OTHER_SECRET": "hunter2-alpha"}) == text.replace("hunter2-alpha", "[OTHER_SECRET]")


def test_a_value_changed_to_one_of_the_same_length_or_registered_from_config_is_seen_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The remembered environment is recognised by its items in order: a change that keeps every length
    (and the variable's place) is still a change; a secret from a config file drops what was remembered."""
    monkeypatch.setenv("FUGU_TEST_TOKEN", "hunter2-alpha")
    text = "hunter2-alpha hunter9-omega quux-frobnicate"
    assert redact(text) == "[FUGU_TEST_TOKEN] hunter9-omega quux-frobnicate"
    monkeypatch.setenv("FUGU_TEST_TOKEN", "hunter9-omega")
    assert redact(text) == "hunter2-alpha [FUGU_TEST_TOKEN] quux-frobnicate"
    monkeypatch.setenv("FUGU_TEST_TOKEN", "hunter2-alpha")  # back as it was
    assert redact(text) == "[FUGU_TEST_TOKEN] hunter9-omega quux-frobnicate"
    register_secret_values({"quux-frobnicate": "[mcp.server token]"})
    assert redact(text) == "[FUGU_TEST_TOKEN] hunter9-omega [mcp.server token]"
