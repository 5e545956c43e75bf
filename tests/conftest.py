"""Every test gets its own FUGU_HOME, no provider keys, offline hubs, and the loopback provider fixtures."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# pytest rewrites the asserts of every test module it imports, and keeps the result in __pycache__ unless
# bytecode writing is off (PYTHONDONTWRITEBYTECODE, set on this machine and in CI): then each of the suite's
# workers rewrote all ~290 test modules on every run, about 7 s of CPU each (24 s of `--collect-only`, 17 s
# with the rewritten modules kept). Writing is turned back on in pytest's own process only (the variable
# still reaches every process the tests start); no test imports a module from its temporary folders here.
sys.dont_write_bytecode = False

# As `fugu` itself does (fugu_cli/__main__.py): OpenMP's idle threads sleep instead of spinning. The tests
# run routers and training in pytest's own processes too, where spinning threads cost several CPU-s a test
# on a 2-core machine (OpenMP reads this when torch is first loaded, so it is set before any import of it).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from tests.loopback import loopback, loopback_factory  # noqa: E402
from tests.ray_kit import _ray_stopped_at_the_end, ray_instance, uses_ray  # noqa: E402
from tests.serve_kit import serve  # noqa: E402
from tests.web_kit import pages  # noqa: E402

__all__ = ["_ray_stopped_at_the_end", "loopback", "loopback_factory", "pages", "ray_instance", "serve"]

_KEY_SUFFIXES = ("_API_KEY", "_API_TOKEN")


MODEL_INFO = Path("cache") / "models.json"  # under FUGU_HOME: litellm's answers about models (app.py)
SEED = "model-info.json"  # in the run's base temporary folder: the answers every test's home starts with


@pytest.fixture(scope="session")
def _model_info_seed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What this run's fugu runs learnt from litellm's model table (windows, tokenizers), one file for all
    of pytest-xdist's workers (their temporary folders share a parent)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / SEED


# the models the tests name literally ("openai/solo", "anthropic/claude-..."): their answers are asked once,
# before the tests, instead of by the first fugu run of each early test (7-8 s of CPU each, on 2 cores)
_MODEL_NAME = re.compile(r"[\"'](?:openai|anthropic|gemini|ollama|ollama_chat)/[A-Za-z0-9_.:\-]+[\"']")


_KEPT_SEED = pytest.StashKey[Path]()  # set by pytest_sessionstart where the seed can be kept


def _kept_seed(config: pytest.Config) -> Path | None:
    """Where the seed is kept between runs (pytest's cache folder), named by fugu's modelinfo.py: a change
    there may change the answers, so it starts a new one. None with -p no:cacheprovider."""
    cache = getattr(config, "cache", None)
    if cache is None:
        return None
    code = (Path(__file__).parents[1] / "fugu_cli" / "llm" / "modelinfo.py").read_bytes()
    try:
        folder = Path(cache.mkdir("fugu-model-info"))
    except OSError:  # a read-only checkout: the seed is asked for again on every run, as before
        return None
    return folder / f"{hashlib.sha256(code).hexdigest()[:16]}.json"


def pytest_sessionstart(session: pytest.Session) -> None:
    """In the run's one controlling process (not in a pytest-xdist worker): the seed of litellm's answers,
    for every model a test file names, asked of litellm (modelinfo.py, as fugu asks it) only where the seed
    kept from the last run lacks them. That file is fugu's own cache (`ModelInfo`), so it holds only answers
    from the litellm table installed now; without it, importing litellm and asking took about 8 s before the
    tests started."""
    config = session.config
    factory = getattr(config, "_tmp_path_factory", None)
    if hasattr(config, "workerinput") or factory is None:
        return
    from fugu_cli.llm.client import load_litellm
    from fugu_cli.llm.modelinfo import ModelInfo

    seed, kept = factory.getbasetemp() / SEED, _kept_seed(config)
    if kept is not None:
        config.stash[_KEPT_SEED] = kept
        if kept.is_file():
            seed.write_bytes(kept.read_bytes())
    here = Path(__file__).parent
    names = sorted({m[1:-1] for f in here.rglob("*.py") for m in _MODEL_NAME.findall(f.read_text("utf-8"))})
    info = ModelInfo(load_litellm, seed)
    for name in names:
        info.get(name)


def _read_model_info(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and isinstance(data.get("models"), dict) and data.get("table")
    return data if ok else None


def _learn_model_info(seed: Path, home: Path) -> None:
    """Add the models a test's fugu runs looked up in litellm's table to the seed (the same table only)."""
    found = _read_model_info(home / MODEL_INFO)
    if found is None:
        return
    known = _read_model_info(seed)
    if known is not None and known["table"] == found["table"]:
        if found["models"].keys() <= known["models"].keys():
            return
        found["models"] = known["models"] | found["models"]
    tmp = seed.with_suffix(f".{os.getpid()}.tmp")  # workers may write at once: the last one's stays
    tmp.write_text(json.dumps(found), encoding="utf-8")
    tmp.replace(seed)


@pytest.fixture(autouse=True)
def _isolated_env(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    _model_info_seed: Path,
) -> Iterator[Path]:
    """A fresh FUGU_HOME, holding only what earlier tests' fugu runs learnt from litellm's model table
    (`cache/models.json`), as a user's home does after a first run: without it every `fugu` the tests start
    imports litellm (3-6 s) to look up the window of a model it has not met. A test marked `cold_home`
    starts from an empty home, as on a first run."""
    home = tmp_path_factory.mktemp("fugu-home")
    seeded = not request.node.get_closest_marker("cold_home")
    if seeded and _model_info_seed.is_file():
        (home / MODEL_INFO).parent.mkdir(parents=True)
        (home / MODEL_INFO).write_bytes(_model_info_seed.read_bytes())
    monkeypatch.setenv("FUGU_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("NO_COLOR", "1")
    for name in list(os.environ):
        if name.endswith(_KEY_SUFFIXES) or (name.startswith("FUGU_") and name != "FUGU_HOME"):
            monkeypatch.delenv(name, raising=False)
    yield home
    _learn_model_info(_model_info_seed, home)


_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A suite started in the background by a shell without job control (`tools/test &`, `nohup ... &`, some CI
# runners) inherits SIGINT ignored, and an ignored signal stays ignored across exec: every fugu the tests
# start would then shrug off the Ctrl-C a test sends it (exit 0, not 130). The tests stand for a user at a
# terminal, where Ctrl-C is delivered: give this process (and so its children) Python's SIGINT handler back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
_PRISTINE = {sig: signal.getsignal(sig) for sig in _SIGNALS}


@pytest.fixture(autouse=True)
def _signal_handlers() -> None:
    """Each test starts with the process's original SIGINT and SIGTERM handlers: a test that ran a stopping
    run in process (fugu's Stopper ignores a further Ctrl-C while it exits) must not leave them ignored, or
    every process a later test starts inherits the ignored signal and no Ctrl-C reaches it."""
    for sig, handler in _PRISTINE.items():
        if handler is not None and signal.getsignal(sig) != handler:
            signal.signal(sig, handler)


DURATIONS = "fugu/durations"  # in pytest's cache: each test's last measured seconds (setup, call, teardown)
# The same figures as the repository keeps them, for a fresh clone whose cache has none (CI): the tests that
# took 0.5 s or more in a full run (tools/save_test_durations.py writes it from the cache after `tools/test`)
SHIPPED_DURATIONS = Path(__file__).with_name("durations.json")


RAY_GROUP = "ray"  # pytest-xdist's group of the tests that use the one local Ray instance


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the group markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest files first, each file's tests together and in their order (tools/test runs pytest-xdist
    with --dist loadgroup, which hands tests out in this order as workers free up: a long test handed out
    last would hold the run up alone). A file's time is the sum of its tests' last measured times: pytest's
    cache, else the repository's durations.json (a fresh clone). The Ray group goes first whatever its
    place: pytest-xdist hands out the work unit with the most tests first. Not with --lf, --ff or --nf,
    which choose an order themselves. The tests that use the one local Ray instance share a worker, which
    starts the instance once (this hook runs first: after pytest-xdist's, the marker was read by nobody,
    and every worker started one)."""
    for item in items:
        if uses_ray(item):
            item.add_marker(pytest.mark.xdist_group(RAY_GROUP))
    cache = getattr(config, "cache", None)
    if cache is None or any(config.getoption(o, False) for o in ("lf", "failedfirst", "newfirst")):
        return
    known: dict[str, float] = {}
    if SHIPPED_DURATIONS.exists():
        known = json.loads(SHIPPED_DURATIONS.read_text("utf-8"))
    known |= cache.get(DURATIONS, {})
    files: dict[str, float] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        files[path] = files.get(path, 0.0) + float(known.get(item.nodeid, 0.0))
    items.sort(key=lambda item: -files[item.nodeid.split("::", 1)[0]])


_LOST_GROUP: set[str] = set()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under `--dist loadgroup`, a grouped test's id must carry its group by now, or pytest-xdist hands the
    group's tests to any worker (as with pytest 9.2, pytest-dev/pytest-xdist#1386); such tests fail, saying
    why (an error raised here would only crash the worker, its message unseen)."""
    if session.config.getoption("loadgroup", False):
        grouped = (i.nodeid for i in session.items if i.get_closest_marker("xdist_group"))
        _LOST_GROUP.update(nodeid for nodeid in grouped if "@" not in nodeid)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.nodeid in _LOST_GROUP:
        pytest.fail(
            "pytest-xdist's --dist loadgroup lost this test's group: this pytest and pytest-xdist do not "
            "work together (pyproject.toml pins a pytest that does): run tools/setup",
            pytrace=False,
        )


_measured: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's time (in the process that reports: pytest-xdist's controller, or pytest itself), under
    its id without the group suffix pytest-xdist adds (the order above is decided before it is added)."""
    nodeid = report.nodeid.removesuffix(f"@{RAY_GROUP}")
    _measured[nodeid] = _measured.get(nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return
    cache = getattr(config, "cache", None)  # none with -p no:cacheprovider
    if _measured and cache is not None:
        known = cache.get(DURATIONS, {})
        cache.set(DURATIONS, known | {k: round(v, 2) for k, v in _measured.items()})
    # the seed, with what this run's fugu runs learnt, kept for the next run (see pytest_sessionstart)
    factory, kept = getattr(config, "_tmp_path_factory", None), config.stash.get(_KEPT_SEED, None)
    seed = factory.getbasetemp() / SEED if factory is not None else None
    if seed is not None and kept is not None and _read_model_info(seed):
        tmp = kept.with_suffix(f".{os.getpid()}.tmp")
        try:
            shutil.copyfile(seed, tmp)
            tmp.replace(kept)
        except OSError:
            tmp.unlink(missing_ok=True)
