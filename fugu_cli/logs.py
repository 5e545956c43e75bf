"""fugu's log: a rotating file under FUGU_HOME that keeps the tracebacks and details the screen leaves out.

Modules log to the "fugu" logger; `setup` (called once by an entry point) gives it a handler, so nothing a
module logs is ever printed on the terminal by the last-resort handler. `--debug` copies it to stderr. Every
handler redacts (`Redacting`): a secret in a message, an argument or a traceback never reaches the file.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from fugu_cli.config import fugu_home
from fugu_cli.redact import redact

_FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"


class Redacting(logging.Filter):
    """Renders a record's message and traceback now, with every secret blanked (fugu_cli.redact)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None  # the formatter prints `exc_text`, which is redacted
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def log_path() -> Path:
    return fugu_home() / "logs" / "fugu.log"


def setup(*, debug: bool = False, debug_file: Path | None = None) -> None:
    """Send the "fugu" logger to the log file (and with `debug`, to stderr too; with `debug_file`, to that
    file too, in full). Safe to call again."""
    logger = logging.getLogger("fugu")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    try:
        path = log_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=2_000_000, backupCount=3, encoding="utf-8", delay=True
        )
        handler.setLevel(logging.DEBUG if debug else logging.INFO)
    except OSError:  # an unusable FUGU_HOME is reported where the store opens; logging just goes nowhere
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter(_FORMAT))
    handler.addFilter(Redacting())
    logger.addHandler(handler)
    if debug_file is not None:
        try:
            copy = logging.FileHandler(debug_file, encoding="utf-8")
        except OSError as e:
            print(f"fugu: --debug-file {debug_file}: {e.strerror or e}", file=sys.stderr)
        else:
            copy.setLevel(logging.DEBUG)
            copy.setFormatter(logging.Formatter(_FORMAT))
            logger.addHandler(copy)
    if debug:
        screen = logging.StreamHandler(sys.stderr)
        screen.setLevel(logging.DEBUG)
        screen.setFormatter(logging.Formatter("fugu %(levelname)s: %(message)s"))
        screen.addFilter(Redacting())
        logger.addHandler(screen)
