"""Issue 10, finding 2: secrets in fugu's environment, the pool's key, URLs and files never reach the model,
stdout or the store, not even through /proc/$PPID/environ."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from fugu_cli.redact import is_secret_name, redact, register_secret_env
from tests.helpers import call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

PLANTED = {
    "OPENAI_KEY": "sk-planted-openai-0000000000000000",
    "github_token": "lowercase-gh-token-value-1",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMIplantedEXAMPLEKEY",
    "DATABASE_PASSWORD": "hunter2-planted",
    "MY_SERVICE_TOKEN": "svc-token-planted-9",
    "PGPASSWORD": "pg-planted-pass",
}
URL_PASSWORD = "url-planted-secret"
POOL_KEY = "pool-key-planted-77777"  # under a name nothing about it says "secret": only the pool knows


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_KEY", True),
        ("github_token", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("DATABASE_PASSWORD", True),
        ("PGPASSWORD", True),
        ("MYSQL_PWD", True),
        ("HF_TOKEN", True),
        ("SLACK_BOT_TOKEN", True),
        ("CLIENT_SECRET", True),
        ("NPM_CONFIG__AUTHTOKEN", True),
        ("NPM_CONFIG__AUTH", True),
        ("GITLAB_PAT", True),
        ("CI_JOB_JWT", True),
        ("CI_JOB_JWT_V2", True),
        ("LOOPBACK_OPENER", False),
        ("PKG_CONFIG_PATH", False),
        ("GIT_AUTHOR_NAME", False),
        ("PATH", False),
        ("PWD", False),
        ("OLDPWD", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("KEYBOARD_LAYOUT", False),
        ("SSH_AUTH_SOCK", False),
        ("HOME", False),
    ],
)
def test_which_names_are_secret(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_the_redactor_catches_every_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DATABASE_URL", f"postgres://app:{URL_PASSWORD}@db.internal:5432/prod")
    monkeypatch.setenv("LOOPBACK_OPENER", POOL_KEY)
    register_secret_env(["LOOPBACK_OPENER"])
    formats = [
        "sk-ant-api03-" + "A" * 40,
        "sk-proj-" + "b" * 30,
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_" + "c" * 36,
        "github_pat_" + "d" * 40,
        "xoxb-1234567890-abcdefghij",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----",
    ]
    text = "\n".join(
        [
            *PLANTED.values(),
            POOL_KEY,
            f"redis://:{URL_PASSWORD}@cache:6379",
            "https://u:p4ss-w0rd@h/x",
            *formats,
        ]
    )
    out = redact(text)
    for secret in [*PLANTED.values(), POOL_KEY, URL_PASSWORD, "p4ss-w0rd", *formats]:
        assert secret not in out, secret
    assert "[OPENAI_KEY]" in out and "[LOOPBACK_OPENER]" in out and "[github_token]" in out
    assert "postgres" not in out or "[REDACTED]" in out
    assert redact("plain text, PATH=/usr/bin, sk-short") == "plain text, PATH=/usr/bin, sk-short"


def test_store_redact_is_the_same_redactor(monkeypatch: pytest.MonkeyPatch) -> None:
    from fugu_cli import store

    monkeypatch.setenv("github_token", "lowercase-gh-token-value-1")
    assert store.redact("x lowercase-gh-token-value-1 y") == "x [github_token] y"


def test_no_planted_secret_reaches_the_model_stdout_or_the_store(
    tmp_path: Path, loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    anthropic = "sk-ant-api03-" + "Z" * 40
    (repo / "config.env").write_text(
        f"DATABASE_URL=postgres://app:{URL_PASSWORD}@db/prod\nKEY={POOL_KEY}\nANTHROPIC={anthropic}\n"
    )
    home = Path(os.environ["FUGU_HOME"])
    probe = (
        "env; echo ---; tr '\\0' '\\n' < /proc/$PPID/environ; echo ---; "
        "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; done; "
        f"ls -a {home}; cat /proc/$PPID/cmdline | tr '\\0' ' '"
    )
    loopback.script(
        "solo",
        [
            tool_reply(call("shell", command=probe)),
            tool_reply(call("read_file", path="config.env")),
            tool_reply(call("shell", command="cat config.env; seq 1 30000")),
            "done looking",
        ],
    )
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {
                "name": "solo",
                "model": "openai/solo",
                "api_base": loopback.base_url,
                "api_key_env": "LOOPBACK_OPENER",
            }
        ],
    )
    env = {**PLANTED, "LOOPBACK_OPENER": POOL_KEY, "DATABASE_URL": f"postgres://app:{URL_PASSWORD}@db/prod"}
    run = fugu(
        "-p", "look around", "--pool", str(pool), "--permission-mode", "full-auto",
        "--output-format", "stream-json", cwd=repo, env=env,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    dump = "\n".join(sqlite3.connect(home / "fugu.db").iterdump())
    sent = json.dumps([r.body for r in loopback.requests_for("solo")])
    kept = "".join(p.read_text(errors="replace") for p in (home / "tool-output").glob("*.log"))
    secrets = [*PLANTED.values(), POOL_KEY, URL_PASSWORD, anthropic]
    for where, text in {
        "stdout": run.stdout,
        "stderr": run.stderr,
        "store": dump,
        "model": sent,
        "kept": kept,
    }.items():
        for secret in secrets:
            assert secret not in text, (where, secret)
    assert "[LOOPBACK_OPENER]" in sent and "[REDACTED]" in sent  # the file's values were there, and blanked
    assert kept  # the 30,000-line output was cut and kept
    assert "fugu.db" not in sent and "FUGU_HOME" not in sent  # FUGU_HOME's contents and name stay outside
