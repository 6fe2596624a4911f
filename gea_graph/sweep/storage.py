r"""Where a sweep's studies live: an embedded SQLite file in the sweep folder, or a shared ``--storage`` URL.

The embedded store is ``DIR/optuna.db`` (Optuna's :class:`~optuna.storages.RDBStorage` on SQLite, which keeps
heartbeats, so a killed worker's trial is failed and retried; Optuna's journal file keeps none). A shared storage is
any URL SQLAlchemy knows (``postgresql://user:password@host/db``, ``mysql+pymysql://...``), so workers on several
machines share one study.

Credentials never reach a file or a log line: :func:`mask` replaces the password (and ``password=`` style query
values) with ``***``, and :func:`scrub` takes the secret out of any message an error carries.
"""
from __future__ import annotations

import os
import random
import time
import warnings
from pathlib import Path

from optuna.exceptions import ExperimentalWarning
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

#: The file of the embedded store in the sweep folder.
EMBEDDED_FILE = "optuna.db"
#: The environment variable a storage URL may be given in (kept out of command lines and shell histories).
STORAGE_ENV = "GEA_GRAPH_STORAGE"
#: Query parameters of a URL that carry secrets.
SECRET_QUERY_KEYS = ("password", "passwd", "pwd", "sslpassword", "token", "secret", "key")


class StorageError(ValueError):
    r"""A storage that cannot be used (unreachable, wrong URL, not a database); the message holds no secret."""


def _secrets(url: str) -> list[str]:
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 -- not a URL SQLAlchemy reads: nothing to take out but the URL itself
        return [url] if "@" in url else []
    found = [parsed.password] if parsed.password else []
    for key, value in parsed.query.items():
        if key.lower() in SECRET_QUERY_KEYS:
            found += [value] if isinstance(value, str) else list(value)
    return [str(s) for s in found if s]


def mask(url: str | None) -> str | None:
    r""":obj:`url` with its password and secret query values replaced by ``***`` (``None`` stays ``None``)."""
    if url is None:
        return None
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001
        return "***" if "@" in url else url
    query = {k: ("***" if k.lower() in SECRET_QUERY_KEYS else v) for k, v in parsed.query.items()}
    return parsed.set(query=query).render_as_string(hide_password=True).replace("%2A%2A%2A", "***")


def scrub(text: str, url: str | None) -> str:
    r""":obj:`text` with every secret of :obj:`url` (and the raw URL) replaced by its masked form."""
    if not url:
        return text
    text = text.replace(url, mask(url) or "")
    from urllib.parse import quote, quote_plus

    for secret in _secrets(url):
        for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
            text = text.replace(form, "***")
    return text


def embedded_url(out: Path) -> str:
    r"""The SQLAlchemy URL of the embedded store of the sweep folder :obj:`out`."""
    return f"sqlite:///{(out / EMBEDDED_FILE).resolve()}"


def open_storage(url: str, heartbeat: float, retries: int = 3) -> RDBStorage:
    r"""Optuna's storage at :obj:`url` with heartbeats every :obj:`heartbeat` seconds: a trial silent for three
    heartbeats is failed, and retried with its parameters up to :obj:`retries` times
    (:class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`, Optuna 5's name of ``RetryFailedTrialCallback``).
    Connects at once: a wrong or unreachable URL raises :class:`StorageError` (no secret in it)."""
    given, url = url, with_driver(url)
    engine: dict = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        # several workers on one file: wait for the writer's lock rather than fail ("database is locked")
        engine = {"connect_args": {"timeout": 120}}
    elif url.startswith("postgresql"):
        engine["connect_args"] = {"connect_timeout": 10}
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)  # heartbeats have been "experimental" since 2.x
                return RDBStorage(url, engine_kwargs=engine, heartbeat_interval=max(1, round(heartbeat)),
                                  grace_period=max(3, round(3 * heartbeat)),
                                  heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=retries))
        except Exception as err:  # noqa: BLE001 -- SQLAlchemy and the drivers raise their own types
            # Workers started at the same moment on a fresh database race to create Optuna's tables: the loser
            # sees "already exists" (PostgreSQL: a unique violation on the type), and finds them made a moment later.
            racing = type(err).__name__ in ("IntegrityError", "ProgrammingError") or "already exists" in str(err)
            if racing and attempt < 4:
                time.sleep(0.5 + random.random())
                continue
            reason = " ".join(str(err).split("\n(Background on this error")[0].split())
            raise StorageError(scrub(scrub(f"cannot open the storage {given}: {type(err).__name__}: {reason}",
                                           given), url)) from None
    raise AssertionError("unreachable")


def with_driver(url: str) -> str:
    r""":obj:`url` with an installed PostgreSQL driver named: SQLAlchemy 2.1 reads a bare ``postgresql://`` as
    psycopg 3; where only psycopg2 (``psycopg2-binary``) is installed, the URL gets ``+psycopg2``."""
    import importlib.util

    if not url.startswith("postgresql://") or importlib.util.find_spec("psycopg") is not None:
        return url
    if importlib.util.find_spec("psycopg2") is None:
        return url
    return "postgresql+psycopg2://" + url[len("postgresql://"):]


def storage_url(given: str | None, out: Path) -> tuple[str, bool]:
    r"""The storage URL (``--storage``, else ``$GEA_GRAPH_STORAGE``, else the embedded store) and whether it is the
    embedded one."""
    url = given or os.environ.get(STORAGE_ENV) or None
    if url is None:
        return embedded_url(out), True
    if "://" not in url:
        raise StorageError(f"--storage {mask(url)!r} is not a database URL such as postgresql://user@host/db or "
                           "sqlite:///path/optuna.db")
    return absolute_sqlite(url), False


def sqlite_file(url: str) -> Path | None:
    r"""The file of a SQLite :obj:`url` (as written: relative or absolute), or ``None`` for other databases and
    for in-memory or ``file:`` URIs."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 -- not a URL SQLAlchemy reads: opening it says why
        return None
    database = parsed.database
    if not parsed.drivername.startswith("sqlite") or not database or database == ":memory:" \
            or database.startswith("file:"):
        return None
    return Path(database)


def absolute_sqlite(url: str) -> str:
    r""":obj:`url` with a relative SQLite file (``sqlite:///studies.db``) made absolute from the working folder;
    other URLs as given. ``sweep.json`` records the URL, and ``--report`` or a rerun from another folder would
    otherwise open (and create) another file of that name there."""
    database = sqlite_file(url)
    if database is None or database.is_absolute():
        return url
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=str(database.resolve())).render_as_string(hide_password=False)
