"""The one redactor: what counts as a secret, and `redact(text)` that blanks every secret in a text.

Secrets are the values of environment variables named like keys, tokens, secrets or passwords, of every
variable a pool's `api_key_env` names (`register_secret_env`), passwords inside URLs, and known key formats.
Bottom layer: imports nothing of fugu's; reads `os.environ` at call time, never at import.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping

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
    | -----BEGIN[A-Z ]*PRIVATE\ KEY-----[\s\S]*?-----END[A-Z ]*PRIVATE\ KEY-----
    """
)
REDACTED = "[REDACTED]"

_registered: set[str] = set()
_values: dict[str, str] = {}  # secrets that live in config files, not the environment: value -> label
_lock = threading.Lock()


def register_secret_env(names: Iterable[str | None]) -> None:
    """Treat these environment variables as secrets from now on (the pool's `api_key_env` names)."""
    with _lock:
        _registered.update(n for n in names if n)


def register_secret_values(values: Mapping[str, str]) -> None:
    """Treat these values as secrets from now on, shown as their labels (an MCP server's token in config)."""
    with _lock:
        _values.update({v: label for v, label in values.items() if len(v) >= MIN_SECRET_LEN})


def registered_secret_env() -> frozenset[str]:
    with _lock:
        return frozenset(_registered)


def is_secret_name(name: str) -> bool:
    """Whether a variable of this name holds a secret: by its name, or because the pool names it."""
    return bool(_SECRET_NAME.search(name)) or name in registered_secret_env()


def secret_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{value: label} of every secret in the environment: secret-named values and passwords inside URLs."""
    env = os.environ if environ is None else environ
    registered = registered_secret_env()
    with _lock:
        found: dict[str, str] = dict(_values)
    for name, value in env.items():
        if (name in registered or _SECRET_NAME.search(name)) and len(value) >= MIN_SECRET_LEN:
            found.setdefault(value, f"[{name}]")
        for match in _URL_CREDENTIALS.finditer(value):
            if len(match["pw"]) >= MIN_SECRET_LEN // 2:
                found.setdefault(match["pw"], f"[{name} password]")
    return found


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every secret replaced by a label: `[OPENAI_API_KEY]`, `[REDACTED]`."""
    if not text:
        return text
    for value, label in sorted(secret_values(environ).items(), key=lambda kv: -len(kv[0])):
        if value in text:
            text = text.replace(value, label)
    text = _URL_CREDENTIALS.sub(lambda m: m["head"] + REDACTED + "@", text)
    return _KEY_FORMATS.sub(REDACTED, text)


def redact_bytes(data: bytes, environ: Mapping[str, str] | None = None) -> bytes:
    """`redact` for raw output whose encoding is unknown (undecodable bytes pass through unchanged)."""
    return redact(data.decode("utf-8", "surrogateescape"), environ).encode("utf-8", "surrogateescape")
