"""Rules on parsed commands: every command a line would run is a part, wrappers and strings unwrapped."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fugu_cli.tools import Part, PermissionPolicy
from fugu_cli.tools.rules import analyze


def parts(command: str) -> list[str]:
    return [p.prefix + ("?" if p.opaque else "") for p in analyze(command)]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("command rm x", ["shell:command", "shell:rm"]),
        ("command -v rm", ["shell:command"]),
        ("env rm x", ["shell:env", "shell:rm"]),
        ("env -i A=1 -u B rm x", ["shell:env", "shell:env A", "shell:rm"]),
        ("env -S 'rm -rf x'", ["shell:env", "shell:rm"]),
        ("sh -c 'rm x'", ["shell:sh", "shell:rm"]),
        ("bash -euo pipefail -c 'ls; rm x'", ["shell:bash", "shell:ls", "shell:rm"]),
        ("eval 'rm x'", ["shell:eval", "shell:rm"]),
        ("find . -delete", ["shell:find", "shell:rm"]),
        ("find . -name '*.pyc' -exec rm {} +", ["shell:find", "shell:rm"]),
        ("find . -exec {} \\;", ["shell:find", "shell:find . -exec {} \\;?"]),
        ("$(echo rm) x", ["shell:echo", "shell:$(echo rm) x?"]),
        ("`echo rm` x", ["shell:echo", "shell:`echo rm` x?"]),
        ("echo `rm x`", ["shell:rm", "shell:echo"]),
        ("$CMD x", ["shell:$CMD x?"]),
        ("/bin/r? x", ["shell:/bin/r? x?"]),
        ("{r,}m x", ["shell:{r,}m x?"]),
        ("echo ${X:-$(rm y)}", ["shell:${X:-$(rm y)}?", "shell:echo"]),
        ("xargs rm < list", ["shell:xargs", "shell:rm"]),
        (
            "ls | xargs -I{} sh -c 'cat {}'",
            ["shell:ls", "shell:xargs", "shell:sh", "shell:xargs -I{} sh -c 'cat {}'?"],
        ),
        (
            "nice -n 5 timeout -s KILL 10 stdbuf -oL rm x",
            ["shell:nice", "shell:timeout", "shell:stdbuf", "shell:rm"],
        ),
        ("sudo -u bob rm x", ["shell:sudo", "shell:rm"]),
        ("watch -n 1 'rm x'", ["shell:watch", "shell:rm"]),
        ("busybox rm x", ["shell:busybox", "shell:rm"]),
        ("echo rm x | sh", ["shell:echo", "shell:sh", "shell:sh?"]),
        ("bash < script.sh", ["shell:bash", "shell:bash < script.sh?"]),
        ("bash --rcfile rc -c 'rm x'", ["shell:bash", "shell:rm"]),
        ("bash tools/test", ["shell:bash"]),
        ("f() { rm x; }; f", ["shell:rm", "shell:f"]),
        ("if true; then rm x; fi", ["shell:true", "shell:rm"]),
        ("cat <(rm x) >(rm y)", ["shell:rm", "shell:cat"]),
        ("A=1 B=2 git status", ["shell:env A", "shell:env B", "shell:git status"]),
        ("PATH=.:$PATH; ls", ["shell:env PATH", "shell:ls"]),
        ("time pytest -q", ["shell:pytest"]),
        ("cat > f <<'EOF'\n$(rm x) `rm y`\nEOF\necho done", ["shell:cat", "shell:echo"]),
        ("cat > f <<EOF\n$(rm x)\nEOF", ["shell:cat > f <<EOF $(rm x) EOF?"]),
        ("echo '<<EOF'\nrm x\nEOF", ["shell:echo '<<EOF' rm x EOF?"]),  # no here-document after all: opaque
        ("[[ -f x ]] && rm x", ["shell:[[ -f x ]] && rm x?"]),
        ("git -c core.fsmonitor=x status", ["shell:git"]),
        ("", ["shell"]),
        # issue 22: wrappers read with their own option grammar, code bash runs that is not a command name
        ("env -S'rm x'", ["shell:env", "shell:rm"]),
        ("env -iS'rm' x", ["shell:env", "shell:rm"]),
        ("env -S'r\\m x'", ["shell:env", "shell:rm", "shell:env -S'r\\m x'?"]),
        ("script -qc 'rm x' /dev/null", ["shell:script", "shell:rm"]),
        ("script log.txt", ["shell:script", "shell:script log.txt?"]),
        ("chrt -o 0 rm x", ["shell:chrt", "shell:rm"]),
        ("prlimit --nofile=100 -n10 rm x", ["shell:prlimit", "shell:rm"]),
        ("setpriv --reuid 1000 --nnp rm x", ["shell:setpriv", "shell:rm"]),
        ("unshare -r --propagation slave rm x", ["shell:unshare", "shell:rm"]),
        ("echo rm x | unshare -U", ["shell:echo", "shell:unshare", "shell:unshare -U?"]),
        ("sudo -Eu root rm x", ["shell:sudo", "shell:rm"]),
        ("watch -d rm x", ["shell:watch", "shell:rm"]),
        ("timeout --frob 5 rm x", ["shell:timeout", "shell:x", "shell:rm"]),  # unknown option: both readings
        ("flock /tmp/l -c 'rm x'", ["shell:flock", "shell:rm"]),
        ("su -c 'rm x'", ["shell:su", "shell:rm"]),
        ("sg grp 'rm x'", ["shell:sg", "shell:sg grp 'rm x'?"]),
        ("trap 'rm x' EXIT", ["shell:trap", "shell:rm"]),
        ("trap - EXIT", ["shell:trap"]),
        ("bash <(echo rm x)", ["shell:echo", "shell:bash", "shell:bash <(echo rm x)?"]),
        ("sh /dev/stdin <<< 'rm x'", ["shell:sh", "shell:sh /dev/stdin <<< 'rm x'?"]),
        ("echo rm x | bash -", ["shell:echo", "shell:bash", "shell:bash -?"]),
        (". <(echo rm x)", ["shell:echo", "shell:.", "shell:. <(echo rm x)?"]),
        ("source .venv/bin/activate", ["shell:source"]),
        ("bash -i -c true", ["shell:bash", "shell:true", "shell:bash -i -c true?"]),
        ("alias x=rm; x f", ["shell:alias", "shell:alias x=rm?", "shell:x"]),
        ("shopt -s expand_aliases", ["shell:shopt", "shell:shopt -s expand_aliases?"]),
        ("BASH_ENV=e bash -c true", ["shell:env BASH_ENV?", "shell:bash", "shell:true"]),
        ("export BASH_ENV=e", ["shell:export", "shell:env BASH_ENV?", "shell:export BASH_ENV=e?"]),
        (
            "env 'BASH_FUNC_f%%=() { :; }' bash -c f",
            ["shell:env", "shell:env BASH_FUNC_f%%?", "shell:bash", "shell:f"],
        ),
        ("hash -p /bin/rm ls; ls x", ["shell:hash", "shell:rm", "shell:ls"]),
        ("compgen -C 'rm x' y", ["shell:compgen", "shell:rm"]),
        ("mapfile -C 'rm x' a < f", ["shell:mapfile", "shell:rm"]),
        ("let x", ["shell:let", "shell:let x?"]),
        ("echo ${!x} ${a[i]} ${s:n}", ["shell:${!x}?", "shell:${a[i]}?", "shell:${s:n}?", "shell:echo"]),
        ('echo "${a[@]}" ${a[0]} ${#a[@]} ${x:-d} ${s:1:2} ${!p*}', ["shell:echo"]),
        ("cat <<EOF\n${a[i]}\nEOF", ["shell:cat <<EOF ${a[i]} EOF?"]),
        ('test -v "$x"', ["shell:test", 'shell:test -v "$x"?']),
        ("export PYTHONPATH=src; pytest -q", ["shell:export", "shell:pytest"]),
        ("fish -c 'rm x'", ["shell:fish", "shell:fish -c 'rm x'?"]),
    ],
)
def test_analyze(command: str, expected: list[str]) -> None:
    assert parts(command) == expected


def test_opaque_parts_need_an_exact_rule_or_no_deny_rules() -> None:
    opaque = Part("shell:$(echo rm) x", opaque=True)
    assert PermissionPolicy(mode="full-auto").check("exec", opaque.prefix, True) == "allow"
    assert PermissionPolicy(mode="full-auto", deny=["shell:rm"]).check("exec", opaque.prefix, True) == "ask"
    assert PermissionPolicy(mode="full-auto", deny=["shell"]).check("exec", opaque.prefix, True) == "deny"
    assert PermissionPolicy(mode="ask", allow=["shell:$(echo"]).check("exec", opaque.prefix, True) == "ask"
    exact = PermissionPolicy(mode="ask", allow=[opaque.prefix], deny=["shell:rm"])
    assert exact.check("exec", opaque.prefix, True) == "allow"
    assert (
        PermissionPolicy(mode="read-only", allow=[opaque.prefix]).check("exec", opaque.prefix, True) == "deny"
    )


# --- generated commands: however `rm` is wrapped, a deny rule on it holds --------------------------------

_WRAP = [
    "command {}",
    "builtin {}",
    "exec {}",
    "env {}",
    "env A=1 {}",
    "env -u HOME {}",
    "nice -n 5 {}",
    "nohup {}",
    "setsid {}",
    "timeout 5 {}",
    "timeout -k 1 5 {}",
    "stdbuf -oL {}",
    "sudo {}",
    "xargs {}",
    "xargs -n 1 {}",
    "time {}",
    "true && {}",
    "false || {}",
    "true; {}",
    "true | {}",
    "( {} )",
    "{{ {}; }}",
    "echo $({})",
    "X=$({})",
    "cat <({})",
    "if true; then {}; fi",
    "for i in 1; do {}; done",
    "while false; do :; done; {}",
    "! {}",
    "chrt -o 0 {}",
    "prlimit --nofile=100 {}",
    "setpriv --nnp {}",
    "unshare -r {}",
    "taskset -c 0 {}",
    "ionice -c2 -n7 {}",
    "setarch x86_64 {}",
    "sudo -Eu root {}",
    "flock /tmp/l {}",
]
_QUOTED = [
    "sh -c {}",
    "bash -c {}",
    "bash -lc {}",
    "eval {}",
    "watch {}",
    "env -S {}",
    "env -S{}",
    "script -qc {} /dev/null",
    "flock /tmp/l -c {}",
    "trap {} EXIT",
    "su -c {}",
]


@st.composite
def hidden_rm(draw: st.DrawFn) -> str:
    command = draw(st.sampled_from(["rm x", "rm -rf x", "/bin/rm x", "'rm' x", '"r"m x', "\\rm x"]))
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            command = draw(st.sampled_from(_WRAP)).format(command)
        else:
            command = draw(st.sampled_from(_QUOTED)).format(shlex.quote(command))
    return command


@settings(max_examples=300, deadline=None)
@given(hidden_rm())
def test_a_deny_rule_sees_through_any_wrapping(command: str) -> None:
    policy = PermissionPolicy(mode="full-auto", deny=["shell:rm"])
    verdicts = {policy.check("exec", p.prefix, p.opaque) for p in analyze(command)}
    assert verdicts & {"deny", "ask"}, (command, analyze(command))


@st.composite
def dynamic_name(draw: st.DrawFn) -> str:
    name = draw(
        st.sampled_from(["$(echo rm)", "`echo rm`", "$CMD", "${CMD}", "r?", "/bin/r*", "{r,}m", "$'rm'"])
    )
    return draw(st.sampled_from(["{} x", "true && {} x", "sh -c '{} x'", "env {} x", "xargs {} x"])).format(
        name
    )


@settings(max_examples=100, deadline=None)
@given(dynamic_name())
def test_a_command_named_at_run_time_is_never_allowed_by_a_prefix_rule(command: str) -> None:
    policy = PermissionPolicy(
        mode="ask", allow=["shell:echo", "shell:true", "shell:sh", "shell:env", "shell:xargs"]
    )
    verdicts = [policy.check("exec", p.prefix, p.opaque) for p in analyze(command)]
    assert "ask" in verdicts, (command, analyze(command))


_PLAIN = st.sampled_from(
    ["git status", "git diff --stat", "ls -la src", "pytest -q tests", "npm test", "make build"]
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_PLAIN, min_size=1, max_size=4), st.sampled_from([" && ", "; ", " | ", " || "]))
def test_plain_commands_are_allowed_part_by_part(commands: list[str], joiner: str) -> None:
    allow = [
        "shell:git status",
        "shell:git diff",
        "shell:ls",
        "shell:pytest",
        "shell:npm test",
        "shell:make build",
    ]
    policy = PermissionPolicy(mode="ask", allow=allow)
    found = analyze(joiner.join(commands))
    assert not any(p.opaque for p in found)
    assert all(policy.check("exec", p.prefix) == "allow" for p in found)
