"""fugu's log: tracebacks go to FUGU_HOME/logs, never to the terminal unless --debug asks for them."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from fugu_cli import logs


def test_errors_go_to_the_log_file_not_the_screen(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup()
    try:
        raise RuntimeError("boom in a turn")
    except RuntimeError as e:
        logging.getLogger("fugu").error("turn failed", exc_info=e)
    for h in logging.getLogger("fugu").handlers:
        h.flush()
    assert capsys.readouterr().err == ""
    text = logs.log_path().read_text()
    assert "turn failed" in text and "RuntimeError: boom in a turn" in text and "Traceback" in text
    assert logs.log_path().parent == Path(os.environ["FUGU_HOME"]) / "logs"


def test_debug_copies_the_log_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup(debug=True)
    logging.getLogger("fugu.router").debug("picked alpha")
    assert "fugu DEBUG: picked alpha" in capsys.readouterr().err
    logs.setup()


def test_a_secret_in_a_message_its_arguments_or_a_traceback_never_reaches_the_log(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "tok-5d2c9e7a1b3f4e60"
    monkeypatch.setenv("DEPLOY_TOKEN", secret)
    logs.setup(debug=True)
    log = logging.getLogger("fugu")
    log.warning("calling with %s", secret)
    log.info(f"inline {secret}")
    try:
        raise RuntimeError(f"the server said: bad token {secret}")
    except RuntimeError:
        log.exception("an ultra step crashed")
    for h in log.handlers:
        h.flush()
    text = logs.log_path().read_text()
    screen = capsys.readouterr().err
    logs.setup()
    assert "calling with [DEPLOY_TOKEN]" in text and "inline [DEPLOY_TOKEN]" in text
    assert "RuntimeError: the server said: bad token [DEPLOY_TOKEN]" in text and "Traceback" in text
    assert "an ultra step crashed" in screen and "[DEPLOY_TOKEN]" in screen
    assert secret not in text and secret not in screen
