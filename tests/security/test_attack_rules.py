"""Issue 10, finding 3: rules are decided on the parsed command, so no wrapping slips a denied command past
them, and an env-prefixed command is not the command its prefix names. Real shell, real files."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fugu_cli.tools import PermissionPolicy, ToolContext
from fugu_cli.types import ToolResult

Call = Callable[..., ToolResult]


@pytest.fixture
def deny_rm(make_ctx: Callable[..., ToolContext]) -> ToolContext:
    return make_ctx(policy=PermissionPolicy(mode="full-auto", deny=["shell:rm"]))


@pytest.mark.parametrize(
    "command",
    [
        "rm victim.txt",
        "command rm victim.txt",
        "env rm victim.txt",
        "env -i rm victim.txt",
        "sh -c 'rm victim.txt'",
        "bash -lc 'rm victim.txt'",
        "find . -name victim.txt -delete",
        "find . -name victim.txt -exec rm {} \\;",
        "$(echo rm) victim.txt",
        "`echo rm` victim.txt",
        "R=rm; $R victim.txt",
        "echo victim.txt | xargs rm",
        "echo victim.txt | xargs -I{} sh -c 'rm {}'",
        "eval 'rm victim.txt'",
        "nice -n 1 timeout 5 rm victim.txt",
        "echo 'rm victim.txt' | sh",
        "sh <<'EOF'\nrm victim.txt\nEOF",
        "true && { rm victim.txt; }",
        'f() { rm "$@"; }; f victim.txt',
        "/bin/r? victim.txt",
        "\\rm victim.txt",
        "busybox rm victim.txt",
        "env -S 'rm victim.txt'",
    ],
)
def test_a_denied_command_does_not_run_however_it_is_wrapped(
    repo: Path, call: Call, deny_rm: ToolContext, command: str
) -> None:
    (repo / "victim.txt").write_text("keep me\n")
    result = call("shell", ctx=deny_rm, command=command)
    assert result.denied, result.content
    assert (repo / "victim.txt").read_text() == "keep me\n"


def test_an_allowed_command_still_runs(repo: Path, call: Call, deny_rm: ToolContext) -> None:
    assert call("shell", ctx=deny_rm, command="ls | wc -l && echo ok").content.endswith("ok\n[exit code: 0]")


def test_env_prefixed_git_is_not_git_status(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    marker = repo / "pwned"
    ctx = make_ctx(policy=PermissionPolicy(mode="ask", allow=["shell:git status"]))
    inject = f"GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='id > {marker}'"
    for command in (
        f"{inject} git status",
        f"git -c core.fsmonitor='id > {marker}' status",
        f"env {inject} git status",
    ):
        result = call("shell", ctx=ctx, command=command)
        assert result.denied and "no terminal to ask" in result.content, command
    assert not marker.exists()
    assert not call("shell", ctx=ctx, command="git status --short").is_error


_WRAPS = [
    "command {}",
    "env {}",
    "nice {}",
    "timeout 9 {}",
    "true && {}",
    "( {} )",
    "echo x | xargs {}",
    "nohup {}",
]
_STRINGS = ["sh -c {}", "bash -c {}", "eval {}"]


@st.composite
def wrapped_rm(draw: st.DrawFn) -> str:
    command = draw(st.sampled_from(["rm victim.txt", "'rm' victim.txt", "rm -f victim.txt"]))
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            command = draw(st.sampled_from(_WRAPS)).format(command)
        else:
            command = draw(st.sampled_from(_STRINGS)).format(shlex.quote(command))
    return command


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(wrapped_rm())
def test_generated_wrappings_never_delete(repo: Path, call: Call, deny_rm: ToolContext, command: str) -> None:
    (repo / "victim.txt").write_text("keep me\n")
    result = call("shell", ctx=deny_rm, command=command)
    assert result.denied, (command, result.content)
    assert (repo / "victim.txt").exists(), command


# --- issue 22, item 7: forms the rules could not read. Each deletes the file when no rule stops it (so the
# form is live, in this sandbox, through the real shell tool), and is refused under `deny = ["shell:rm"]`.
_HIDE = "x=$(printf 'a[$%s]' '(rm victim.txt)')"  # a string bash evaluates as code; no `$(rm` in the line
_UNSEEN = [
    "bash <(echo rm victim.txt)",
    "sh /dev/stdin <<< 'rm victim.txt'",
    "env -S'rm victim.txt'",
    "trap 'rm victim.txt' EXIT",
    "shopt -s expand_aliases; alias x=rm\nx victim.txt",
    "sh -c 'alias x=rm\nx victim.txt'",
    "echo 'rm victim.txt' > e; BASH_ENV=e bash -c true",
    "script -qc 'rm victim.txt' /dev/null",
    "chrt -o 0 rm victim.txt",
    "prlimit --nofile=100 rm victim.txt",
    "setpriv --nnp rm victim.txt",
    "unshare -U rm victim.txt",
    "unshare -r rm victim.txt",
    # the same kinds, found while closing those
    "echo 'rm victim.txt' | bash -",
    "bash /proc/self/fd/0 <<< 'rm victim.txt'",
    ". <(echo rm victim.txt)",
    "echo 'rm victim.txt' | unshare -U",
    "BASH_ENV=<(echo rm victim.txt) bash -c true",
    "declare -x BASH_ENV=e; echo 'rm victim.txt' > e; bash -c true",
    "env 'BASH_FUNC_ls%%=() { rm victim.txt; }' bash -c ls",
    "PS4='$(rm victim.txt)'; set -x; true",
    "hash -p /bin/rm ls; ls victim.txt",
    "compgen -C 'rm victim.txt' x",
    "mapfile -C 'rm victim.txt; :' -c 1 a <<< x",
    "setarch x86_64 rm victim.txt",
    f"{_HIDE}; let x",
    f"{_HIDE}; echo ${{!x}}",
    f"{_HIDE}; a=(1); echo ${{a[x]}}",
    f'{_HIDE}; test -v "$x"',
]


@pytest.mark.parametrize("command", _UNSEEN)
def test_a_form_rules_cannot_read_is_refused_under_a_deny_rule(
    repo: Path, call: Call, deny_rm: ToolContext, make_ctx: Callable[..., ToolContext], command: str
) -> None:
    victim = repo / "victim.txt"
    victim.write_text("keep me\n")
    result = call("shell", ctx=deny_rm, command=command)
    assert result.denied, result.content
    assert victim.read_text() == "keep me\n"
    free = call("shell", ctx=make_ctx(policy=PermissionPolicy(mode="full-auto")), command=command)
    assert not victim.exists(), free.content  # with no rule it does delete: the form is live
