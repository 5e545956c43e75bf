"""Programs that run another command given as their arguments (`nice`, `timeout`, `env`, `unshare`, ...).

`unwrap` reads one wrapper's options the way the program itself does and says what it would run: the wrapped
command's words, shell scripts passed as option values (`script -c`, `flock -c`, `env -S`), or that it would
start a shell reading commands from stdin. Where its option grammar leaves it unsure (an option it does not
know), it returns every reading, so a rule sees each command the line could run. Pure: parses words, runs
nothing, knows nothing about rules.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Literal

Rest = Literal["command", "script", "none", "opaque"]


@dataclass(frozen=True)
class Spec:
    """One wrapper's option grammar, as far as finding the command it runs needs."""

    short: str = ""  # short options that take a value (`-n 5`, `-n5`)
    optional: str = ""  # short options whose value can only be attached (`unshare -m/run/ns`)
    long: frozenset[str] = frozenset()  # long options that take a value (`--signal KILL`)
    flags: frozenset[str] = frozenset()  # long options known to take none (so no second reading)
    script_short: str = ""  # options whose value is a shell script
    script_long: frozenset[str] = frozenset()
    positional: int = 0  # words before the command (timeout's DURATION)
    rest: Rest = "command"  # what the words after the options are: a command, one script, not code, unknown
    bare_shell: bool = False  # with no command and no script it starts a shell that reads stdin
    permute: bool = False  # options may follow the operands (GNU getopt without "+")
    env_assign: bool = False  # NAME=VALUE words set variables (env)
    replaces: bool = False  # -I/-i/--replace name the word its input replaces (xargs)
    lookup: str = ""  # options that make it only look the name up (`command -v`)


@dataclass(frozen=True)
class Runs:
    """What a wrapper (one reading of it) or a shell builtin would run, as far as its words tell."""

    command: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()
    assigns: tuple[str, ...] = ()  # variables set for the command
    placeholder: str | None = None  # xargs -I: the word replaced by input
    opaque: bool = False  # it runs commands no rule can read (a shell on stdin, `sg group 'cmd'`)
    options: dict[str, str] = field(default_factory=dict, compare=False)


def _f(words: str) -> frozenset[str]:
    return frozenset(words.split())


WRAPPERS: dict[str, Spec] = {
    "command": Spec(lookup="vV"),
    "builtin": Spec(),
    "exec": Spec(short="a"),
    "nohup": Spec(),
    "setsid": Spec(flags=_f("ctty fork wait")),
    "unbuffer": Spec(),
    "chronic": Spec(),
    "time": Spec(short="fo", long=_f("format output"), flags=_f("append portability verbose quiet")),
    "nice": Spec(short="n", long=_f("adjustment")),
    "ionice": Spec(short="cnpPu", long=_f("class classdata pid pgid uid"), flags=_f("ignore")),
    "stdbuf": Spec(short="ioe", long=_f("input output error")),
    "sudo": Spec(
        short="CDghpRrTtUu",
        long=_f("close-from chdir group host prompt chroot role command-timeout type other-user user"),
        flags=_f("preserve-env login shell non-interactive background stdin set-home reset-timestamp"),
        bare_shell=True,
    ),
    "doas": Spec(short="uC", bare_shell=True),
    "pkexec": Spec(long=_f("user"), flags=_f("disable-internal-agent keep-cwd"), bare_shell=True),
    "strace": Spec(short="abeEIoOpPsSuUX", long=_f("output signal trace status")),
    "ltrace": Spec(short="aeEIlLnopsSu", long=_f("output library")),
    "taskset": Spec(positional=1, flags=_f("all-tasks pid cpu-list")),
    "timeout": Spec(
        short="ks", long=_f("kill-after signal"), flags=_f("preserve-status foreground verbose"), positional=1
    ),
    "xargs": Spec(
        short="adEILnPs",
        optional="eil",
        long=_f("arg-file delimiter max-lines max-args max-procs process-slot-var max-chars"),
        flags=_f("null open-tty interactive no-run-if-empty show-limits verbose exit replace eof"),
        replaces=True,
    ),
    "env": Spec(
        short="uCa",
        long=_f("unset chdir argv0"),
        flags=_f("ignore-environment null debug list-signal-handling"),
        script_short="S",
        script_long=_f("split-string"),
        env_assign=True,
    ),
    "flock": Spec(
        short="wE",
        long=_f("timeout conflict-exit-code"),
        flags=_f("shared exclusive unlock nonblock close no-fork verbose"),
        script_short="c",
        script_long=_f("command"),
        positional=1,
    ),
    "watch": Spec(
        short="nq",
        optional="d",
        long=_f("interval equexit"),
        flags=_f("beep color errexit chgexit precise no-title no-wrap exec"),
        rest="script",
    ),
    "chrt": Spec(
        short="TPD",
        long=_f("sched-runtime sched-period sched-deadline"),
        flags=_f("batch deadline fifo idle other rr reset-on-fork all-tasks max pid verbose"),
        positional=1,
    ),
    "prlimit": Spec(
        short="po",
        optional="cdefilmnqrstuvxy",
        long=_f("pid output"),
        flags=_f(
            "noheadings raw verbose core data nice fsize sigpending memlock rss nofile msgqueue rtprio stack "
            "cpu nproc as locks rttime"
        ),
    ),
    "setpriv": Spec(
        long=_f(
            "ambient-caps inh-caps bounding-set ruid euid rgid egid reuid regid groups securebits pdeathsig "
            "selinux-label apparmor-profile landlock-access landlock-rule seccomp-filter"
        ),
        flags=_f("dump nnp no-new-privs clear-groups keep-groups init-groups reset-env"),
    ),
    "unshare": Spec(
        short="RwSG",
        optional="muinpUCT",
        long=_f("propagation setgroups root wd setuid setgid monotonic boottime map-user map-group")
        | _f("map-users map-groups"),
        flags=_f("fork map-root-user map-current-user map-auto keep-caps mount uts ipc net pid user")
        | _f("cgroup time kill-child mount-proc"),
        bare_shell=True,
    ),
    "nsenter": Spec(
        short="tSGW",
        optional="muinpCUTrw",
        long=_f("target setuid setgid wdns"),
        flags=_f("all preserve-credentials no-fork follow-context mount uts ipc net pid cgroup user time")
        | _f("root wd"),
        bare_shell=True,
    ),
    "chroot": Spec(long=_f("userspec groups"), flags=_f("skip-chdir"), positional=1, bare_shell=True),
    "setarch": Spec(positional=1, bare_shell=True),
    "linux32": Spec(bare_shell=True),
    "linux64": Spec(bare_shell=True),
    "fakeroot": Spec(short="lsbi", long=_f("lib faked"), flags=_f("unknown-is-real"), bare_shell=True),
    "script": Spec(
        short="IOBTmEo",
        optional="t",
        long=_f("log-in log-out log-io log-timing logging-format echo output-limit"),
        flags=_f("append return flush force quiet timing"),
        script_short="c",
        script_long=_f("command"),
        rest="none",
        bare_shell=True,
        permute=True,
    ),
    # run their command through a shell: `-c STRING` is read; anything else given to that shell is not
    "su": Spec(
        short="gGsw",
        long=_f("group supp-group shell whitelist-environment"),
        flags=_f("login preserve-environment pty fast"),
        script_short="c",
        script_long=_f("command session-command"),
        positional=1,
        rest="opaque",
        bare_shell=True,
        permute=True,
    ),
}
WRAPPERS["runuser"] = WRAPPERS["su"]
WRAPPERS["sg"] = Spec(script_short="c", positional=1, rest="opaque", bare_shell=True, permute=True)
_MAX_READINGS = 4


def unwrap(words: list[str]) -> list[Runs]:
    """Every reading of what the wrapper `words[0]` would run (one, unless an unknown option leaves doubt)."""
    from os.path import basename

    spec = WRAPPERS[basename(words[0])]
    readings: list[Runs] = []
    _parse(spec, words[1:], spec.positional, readings)
    return readings


def _parse(spec: Spec, rest: list[str], positional: int, readings: list[Runs]) -> None:
    scripts: list[str] = []
    assigns: list[str] = []
    options: dict[str, str] = {}
    operands: list[str] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        following = rest[i + 1] if i + 1 < len(rest) else ""
        if word == "--":
            i += 1
            break
        if spec.env_assign and "=" in word and not word.startswith("-"):
            assigns.append(word.split("=", 1)[0])
        elif word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            takes = name in spec.long or name in spec.script_long
            if takes and not eq:
                value, i = following, i + 1
            if name in spec.script_long:
                scripts.append(value)
            options[name] = value
            if not takes and not eq and name not in spec.flags and len(readings) < _MAX_READINGS:
                _parse(spec, rest[i + 2 :], positional, readings)  # the unknown option may take a value
        elif word.startswith("-") and len(word) > 1:
            i += _cluster(spec, word[1:], following, options, scripts)
        elif positional > 0:
            positional -= 1
        elif spec.permute:
            operands.append(word)
        else:
            break
        i += 1
    operands.extend(rest[i:])
    readings.append(_reading(spec, operands, scripts, assigns, options))


def _cluster(spec: Spec, cluster: str, following: str, options: dict[str, str], scripts: list[str]) -> int:
    """Read `-abc`: flags until one that takes a value; returns 1 when that value was the next word."""
    for j, ch in enumerate(cluster):
        if ch in spec.optional:
            options[ch] = cluster[j + 1 :]
            return 0
        if ch in spec.short or ch in spec.script_short:
            value = cluster[j + 1 :]
            used = 0 if value else 1
            value = value or following
            if ch in spec.script_short:
                scripts.append(value)
            options[ch] = value
            return used
        options[ch] = ""
    return 0


def _reading(
    spec: Spec, operands: list[str], scripts: list[str], assigns: list[str], options: dict[str, str]
) -> Runs:
    command: tuple[str, ...] = ()
    opaque = False
    if spec.rest == "command" and not any(ch in options for ch in spec.lookup):
        command = tuple(operands)
    elif spec.rest == "script" and operands:
        scripts = [*scripts, " ".join(operands)]
    elif spec.rest == "opaque" and operands:
        opaque = True
    if spec.env_assign and scripts:  # env -S: the split string, then the words after it as its arguments
        opaque = opaque or any("\\" in s or "${" in s for s in scripts)  # env's own escapes and ${VAR}
        scripts, command = [" ".join([scripts[-1], *(shlex.quote(w) for w in command)])], ()
    if spec.bare_shell and not command and not scripts:
        opaque = True
    placeholder = _placeholder(options) if spec.replaces else None
    return Runs(command, tuple(scripts), tuple(assigns), placeholder, opaque, options)


def _placeholder(options: dict[str, str]) -> str | None:
    """xargs' replace string: `-I R`, `-i[R]`, `--replace[=R]` (default `{}`)."""
    if "I" in options:
        return options["I"] or "{}"
    for key in ("i", "replace"):
        if key in options:
            return options[key] or "{}"
    return None
