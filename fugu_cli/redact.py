"""The one redactor: what counts as a secret, and `redact(text)` that blanks every secret in a text.

Secrets are the values of environment variables named like keys, tokens, secrets or passwords, of every
variable a pool's `api_key_env` names (`register_secret_env`), passwords and tokens inside URLs, passwords
handed to a JVM (`-D...password=`), and known key formats (`looks_secret` says whether a value holds one).
Bottom layer: imports nothing of fugu's; reads `os.environ` at call time, never at import.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

MIN_SECRET_LEN = 6  # shorter values ("1", "true") would blank ordinary words everywhere

# A name is secret-like if one of its `_`-separated words (or a glued form like PGPASSWORD) says so.
_SECRET_NAME = re.compile(
    r"""(?ix)
    (?:^|_)(?:API_?)?KEYS?(?:$|_)            # OPENAI_KEY, AWS_ACCESS_KEY_ID, API_KEY, KEY
    | APIKEY | ACCESS_?KEY | PRIVATE_?KEY
    | (?:^|_)TOKENS?(?:$|_) | TOKEN$          # GITHUB_TOKEN, github_token, HFTOKEN (not TOKENIZERS_*)
    | SECRET                                  # AWS_SECRET_ACCESS_KEY, CLIENTSECRET
    | PASSW(?:OR)?D | PASSPHRASE | (?:^|_)PASS(?:$|_) | _PWD$   # DATABASE_PASSWORD, PGPASSWORD, MYSQL_PWD
    | CREDENTIALS?
    | COOKIE | SESSION_?ID | (?:^|_)DSN$
    | (?:^|_)AUTH$ | (?:^|_)PAT$ | JWT        # NPM_CONFIG__AUTH, GITLAB_PAT, CI_JOB_JWT (not SSH_AUTH_SOCK)
    """
)
# user:password@ inside any URL; the password is group "pw"
_URL_CREDENTIALS = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@\"'<>]*:)(?P<pw>[^\s@/\"'<>]+)@")
_KEY_FORMATS = re.compile(
    r"""(?x)
    \bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}          # OpenAI, Anthropic and compatible
    | \b(?:AKIA|ASIA)[0-9A-Z]{16}\b                   # AWS access key ids
    | \bgh[pousr]_[A-Za-z0-9]{30,}                    # GitHub tokens
    | \bgithub_pat_[A-Za-z0-9_]{22,}
    | \bxox[abprs]-[A-Za-z0-9\-]{10,}                 # Slack
    | \bAIza[0-9A-Za-z_\-]{35}                        # Google API keys
    | \bglpat-[A-Za-z0-9_\-]{20,}                     # GitLab
    | \bhf_[A-Za-z0-9]{30,}                           # Hugging Face
    | \bnpm_[A-Za-z0-9]{36}                           # npm
    | \b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}          # Stripe secret and restricted keys
    | \beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*   # JWTs (CI_JOB_JWT, OIDC tokens)
    | -----BEGIN[A-Z ]*PRIVATE\ KEY-----[\s\S]*?-----END[A-Z ]*PRIVATE\ KEY-----
    """
)
# Every key format above contains one of these: without them, the regular expression cannot match.
_KEY_MARKS = (
    "sk-", "AKIA", "ASIA", "gh", "github_pat_", "xox", "AIza", "glpat-", "hf_", "npm_", "_live_", "_test_",
    "eyJ", "PRIVATE KEY",
)  # fmt: skip
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>]+")
# a token in a URL's query (`?token=`, `&access_token=`, `?sig=`): the value is group "value"
_URL_TOKEN = re.compile(
    r"(?i)(?P<head>[?&;][\w.\-]*(?:token|key|secret|passw(?:or)?d|pwd|auth|sig(?:nature)?|credential)s?=)"
    r"(?P<value>[^&#;\s\"'<>]{6,})"
)
# a password handed to a JVM (MAVEN_OPTS, GRADLE_OPTS, JAVA_TOOL_OPTIONS): `-Dsome.password=value`
_JVM_SECRET = re.compile(
    r"(?i)(?P<head>-D[\w.\-]*(?:passw(?:or)?d|pwd|secret|token|credential|api[._\-]?key|access[._\-]?key)"
    r"[\w.\-]*=)(?P<value>[^\s\"']+)"
)
REDACTED = "[REDACTED]"

_registered: set[str] = set()
_values: dict[str, str] = {}  # secrets that live in config files, not the environment: value -> label
_lock = threading.Lock()
_EnvKey = tuple[frozenset[str], frozenset[tuple[Any, Any]]]
# the last environment asked about: its key, its secrets, its items as read and how many names were registered
# then (an unchanged environment is recognised by comparing its items in order, not hashing them into a key)
_Last = tuple[_EnvKey | None, dict[str, str], list[tuple[Any, Any]] | None, int]
_last: _Last = (None, {}, None, -1)
_redacted: OrderedDict[tuple[_EnvKey, str], str] = OrderedDict()  # the last texts redacted in it


def register_secret_env(names: Iterable[str | None]) -> None:
    """Treat these environment variables as secrets from now on (the pool's `api_key_env` names)."""
    with _lock:
        _registered.update(n for n in names if n)


def register_secret_values(values: Mapping[str, str]) -> None:
    """Treat these values as secrets from now on, shown as their labels (an MCP server's token in config)."""
    global _last
    with _lock:
        _values.update({v: label for v, label in values.items() if len(v) >= MIN_SECRET_LEN})
        _last = (None, {}, None, -1)  # the remembered secrets and redactions lack these
        _redacted.clear()


def registered_secret_env() -> frozenset[str]:
    with _lock:
        return frozenset(_registered)


def is_secret_name(name: str) -> bool:
    """Whether a variable of this name holds a secret: by its name, or because the pool names it."""
    return bool(_SECRET_NAME.search(name)) or name in registered_secret_env()


def secret_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{value: label} of every secret in the environment: secret-named values and passwords inside URLs."""
    return dict(_secrets(environ)[1])


def _secrets(environ: Mapping[str, str] | None) -> tuple[_EnvKey, dict[str, str]]:
    """The environment's key and its secrets, remembered until the environment (or the registered names)
    change: every stored message and tool output is redacted, several times a step."""
    global _last
    env = os.environ if environ is None else environ
    # os.environ's own bytes: reading them through the mapping decodes every value on every call
    items = list(os.environ._data.items() if env is os.environ else env.items())  # type: ignore[attr-defined]
    with _lock:
        key, found, seen, count = _last
        # names are only ever added: the same count is the same names
        if key is not None and count == len(_registered) and seen == items:
            return key, found
        registered, count = frozenset(_registered), len(_registered)
    new: _EnvKey = (registered, frozenset(items))
    with _lock:
        if _last[0] == new:
            _last = (_last[0], _last[1], items, count)
            return new, _last[1]
    found = _secret_values(env, new[0])
    with _lock:
        _last = (new, found, items, count)
        _redacted.clear()
    return new, found


def _secret_values(env: Mapping[str, str], registered: frozenset[str]) -> dict[str, str]:
    with _lock:
        found: dict[str, str] = dict(_values)
    for name, value in env.items():
        if (name in registered or _SECRET_NAME.search(name)) and len(value) >= MIN_SECRET_LEN:
            found.setdefault(value, f"[{name}]")
        for match in _URL_CREDENTIALS.finditer(value):
            if len(match["pw"]) >= MIN_SECRET_LEN // 2:
                found.setdefault(match["pw"], f"[{name} password]")
        for pattern in (_URL_TOKEN, _JVM_SECRET):
            for match in pattern.finditer(value):
                if len(match["value"]) >= MIN_SECRET_LEN:
                    found.setdefault(match["value"], f"[{name} secret]")
    return found


def looks_secret(value: str) -> bool:
    """Whether a value holds a secret whatever its variable's name: a known key format, a password or token
    in a URL, a password handed to a JVM (`-D...password=`)."""
    if any(mark in value for mark in _KEY_MARKS) and _KEY_FORMATS.search(value):
        return True
    if "://" in value and (_URL_CREDENTIALS.search(value) or _url_token(value)):
        return True
    return "-D" in value and _JVM_SECRET.search(value) is not None


def _url_token(text: str) -> bool:
    return any(_URL_TOKEN.search(m.group()) for m in _URL.finditer(text))


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every secret replaced by a label: `[OPENAI_API_KEY]`, `[REDACTED]`."""
    if not text:
        return text
    key, secrets = _secrets(environ)
    with _lock:  # a tool's output is stored as a message and as the call's result: redact it once
        done = _redacted.get((key, text))
    if done is not None:
        return done
    out = text
    for value, label in sorted(secrets.items(), key=lambda kv: -len(kv[0])):
        if value in out:
            out = out.replace(value, label)
    if "://" in out:
        out = _URL_CREDENTIALS.sub(lambda m: m["head"] + REDACTED + "@", out)
        out = _URL.sub(lambda m: _URL_TOKEN.sub(lambda t: t["head"] + REDACTED, m.group()), out)
    if any(mark in out for mark in _KEY_MARKS):
        out = _KEY_FORMATS.sub(REDACTED, out)
    if "-D" in out:
        out = _JVM_SECRET.sub(lambda m: m["head"] + REDACTED, out)
    with _lock:
        _redacted[(key, text)] = out
        while len(_redacted) > 32:
            _redacted.popitem(last=False)
    return out


def redact_bytes(data: bytes, environ: Mapping[str, str] | None = None) -> bytes:
    """`redact` for raw output whose encoding is unknown (undecodable bytes pass through unchanged)."""
    return redact(data.decode("utf-8", "surrogateescape"), environ).encode("utf-8", "surrogateescape")
