"""Issue 22, findings 3, 5 and 6: a host unix socket under /run reached from the sandbox (a stand-in for
docker.sock ran its payload as root), credential files of common tools readable by any command and returned
unredacted, and secrets in allow-listed environment variables (`CI_JOB_JWT`, `NPM_CONFIG__AUTH`, a `token=`
index URL, `-D...password=` in `MAVEN_OPTS`) reaching every command, the redactor missing their formats."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fugu_cli.redact import looks_secret, redact
from fugu_cli.tools import sandbox as sb
from fugu_cli.tools.env import minimal_env
from tests.helpers import call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJwcm9qZWN0X3BhdGg6Z3JvdXAvcHJvamVjdCJ9.c2lnbmF0dXJlLXBsYW50ZWQtMDAx"
NPM_TOKEN = "npm_" + "Pl4nt3d" * 5 + "x"
STRIPE = "sk_live_" + "51Hplanted" * 3
PLANTED_ENV = {
    "CI_JOB_JWT": JWT,
    "NPM_CONFIG__AUTH": "bnBtLXVzZXI6cGxhbnRlZC1hdXRo",
    "GITLAB_PAT": "glpat-planted-personal-token",
    "PIP_INDEX_URL": "https://pypi.example.com/simple?token=pip-index-token-planted",
    "MAVEN_OPTS": "-Xmx2g -Dmaven.repo.password=maven-pw-planted",
    "GRADLE_OPTS": "-Dorg.gradle.jvmargs=-Xmx1g -Dsigning.password=gradle-pw-planted",
    "NODE_AUTH_TOKEN": NPM_TOKEN,
    "CI_STRIPE": STRIPE,
}
SECRET_VALUES = ["pip-index-token-planted", "maven-pw-planted", "gradle-pw-planted", JWT, NPM_TOKEN, STRIPE]


# --- sockets ---------------------------------------------------------------------------------------------


@pytest.fixture
def host_socket() -> Iterator[tuple[Path, list[bytes]]]:
    """A unix socket server on the host, in a socket folder (a stand-in for docker.sock): what it hears."""
    folder = next(Path(p) for p in ("/run", "/var/run", "/dev/shm") if os.access(p, os.W_OK))
    path = folder / f"fugu-test-{os.getpid()}.sock"
    heard: list[bytes] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                heard.append(conn.recv(1024) or b"(connected)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield path, heard
    finally:
        stop.set()
        thread.join(timeout=2)
        server.close()
        path.unlink(missing_ok=True)


def test_a_host_socket_in_a_socket_folder_cannot_be_reached(
    repo: Path, host_socket: tuple[Path, list[bytes]]
) -> None:
    path, heard = host_socket
    probe = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        f"try:\n s.connect({str(path)!r}); s.send(b'POST /containers/create'); print('CONNECTED')\n"
        "except OSError as e: print('refused', e)\n"
    )
    with_control = sb.run(["python3", "-c", probe], cwd=repo, policy=sb.SandboxPolicy(mode="off"))
    assert b"CONNECTED" in with_control.output  # the socket is real and reachable from the host
    heard.clear()
    for mode in ("workspace-write", "read-only"):
        done = sb.run(["python3", "-c", probe], cwd=repo, policy=sb.SandboxPolicy(mode=mode))  # type: ignore[arg-type]
        assert done.sandboxed and b"refused" in done.output, done.output
    listing = sb.run(["bash", "-c", "ls -A /run /var/run"], cwd=repo, policy=sb.SandboxPolicy())
    assert listing.output.decode().split() in (["/run:", "/var/run:"], ["/var/run:", "/run:"]), listing.output
    assert heard == []


# --- credential files --------------------------------------------------------------------------------------

CREDENTIAL_FILES = {
    ".claude/.credentials.json": '{"claudeAiOauth": {"accessToken": "CLAUDE-PLANTED"}}',
    ".codex/auth.json": '{"OPENAI_API_KEY": "CODEX-PLANTED"}',
    ".npmrc": "//registry.npmjs.org/:_authToken=NPMRC-PLANTED",
    ".pgpass": "db:5432:app:app:PGPASS-PLANTED",
    ".cargo/credentials.toml": '[registry]\ntoken = "CARGO-PLANTED"',
    ".config/gcloud/application_default_credentials.json": '{"refresh_token": "GCLOUD-PLANTED"}',
    ".bash_history": "export OPENAI_API_KEY=HISTORY-PLANTED",
    ".docker/config.json": '{"auths": {"x": {"auth": "DOCKER-PLANTED"}}}',
    ".netrc": "machine x login u password NETRC-PLANTED",
    ".git-credentials": "https://u:GITCRED-PLANTED@github.com",
    ".config/gh/hosts.yml": "github.com:\n  oauth_token: GH-PLANTED",
    ".kube/config": "users:\n- user:\n    token: KUBE-PLANTED",
    ".aws/credentials": "[default]\naws_secret_access_key = AWS-PLANTED",
    ".mytool/token": "MYTOOL-PLANTED",  # not in the list: hidden by `[sandbox] hide` in the user's config
}


def test_credential_files_of_common_tools_never_reach_the_model(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    home = tmp_path / "home"
    for rel, content in CREDENTIAL_FILES.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(content + "\n")
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text('[sandbox]\nhide = ["~/.mytool"]\n')
    repo = make_repo(tmp_path / "repo")
    reads = " ".join(f"~/{rel}" for rel in CREDENTIAL_FILES)
    loopback.script(
        "w",
        [
            tool_reply(call("shell", command=f"cat {reads}; grep -r 'PLANT[E]D' ~ 2>/dev/null; echo END")),
            "Nothing there.",
        ],
    )
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "w", "model": "openai/w", "api_base": loopback.base_url}]
    )
    run = fugu(
        "-p", "look in my home", "--pool", str(pool), "--permission-mode", "full-auto", cwd=repo,
        env={"HOME": str(home)},
    )  # fmt: skip
    assert run.code == 0, run.stderr
    sent = json.dumps([r.messages for r in loopback.requests_for("w")])
    assert "END" in sent  # the command ran
    assert "PLANTED" not in sent


# --- the environment and the redactor -----------------------------------------------------------------------


def test_secret_values_in_allowed_variables_stay_out_of_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLANTED_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NODE_OPTIONS", "--max-old-space-size=4096")
    monkeypatch.setenv("MAVEN_ARGS", "-B -q")
    env = minimal_env()
    assert not set(PLANTED_ENV) & set(env), sorted(set(PLANTED_ENV) & set(env))
    assert env["NODE_OPTIONS"] == "--max-old-space-size=4096" and env["MAVEN_ARGS"] == "-B -q"
    assert (
        minimal_env(pass_env=["MAVEN_OPTS"])["MAVEN_OPTS"] == PLANTED_ENV["MAVEN_OPTS"]
    )  # the user's choice


def test_the_redactor_knows_the_round_two_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "\n".join(
        [
            f"jwt {JWT}",
            f"npm {NPM_TOKEN}",
            f"stripe {STRIPE} and rk_live_{'R' * 24}",
            "pip install --index-url https://pypi.example.com/simple?token=pip-index-token-planted pkg",
            "curl 'https://api.example.com/v1/x?format=json&access_token=url-access-token-planted'",
            "java -Dmaven.repo.password=maven-pw-planted -Djavax.net.ssl.keyStorePassword=ks-pw-planted",
        ]
    )
    out = redact(text, {})
    for secret in [JWT, NPM_TOKEN, STRIPE, "R" * 24, "pip-index-token-planted", "url-access-token-planted"]:
        assert secret not in out, secret
    assert "maven-pw-planted" not in out and "ks-pw-planted" not in out
    assert "?token=[REDACTED]" in out and "-Dmaven.repo.password=[REDACTED]" in out
    for value in PLANTED_ENV.values():
        assert looks_secret(value) or value == PLANTED_ENV["NPM_CONFIG__AUTH"] or "glpat" in value
    assert not looks_secret("--max-old-space-size=4096") and not looks_secret("https://pypi.org/simple")
    plain = "see https://example.com/docs?page=2&sort=asc and -Dfile.encoding=UTF-8, eyJ alone"
    assert redact(plain, {}) == plain


def test_the_named_and_the_embedded_secrets_of_fugus_environment_never_reach_the_model(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "deploy.log").write_text(f"using {JWT}\nauth {NPM_TOKEN}\n")
    loopback.script(
        "w",
        [
            tool_reply(
                call("shell", command="env; tr '\\0' '\\n' < /proc/$PPID/environ; cat deploy.log"),
                call("read_file", path="deploy.log"),
            ),
            "Seen.",
        ],
    )
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "w", "model": "openai/w", "api_base": loopback.base_url}]
    )
    run = fugu(
        "-p", "what is deployed", "--pool", str(pool), "--permission-mode", "full-auto",
        cwd=repo, env=PLANTED_ENV,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    sent = json.dumps([r.messages for r in loopback.requests_for("w")])
    dump = "\n".join(sqlite3.connect(Path(os.environ["FUGU_HOME"]) / "fugu.db").iterdump())
    assert "PATH=" in sent  # env ran
    for where, text in {"model": sent, "stdout": run.stdout, "store": dump}.items():
        for name, value in PLANTED_ENV.items():
            assert value not in text, (where, name)
        for value in SECRET_VALUES:
            assert value not in text, (where, value)
