"""The embedded SQLite store (`sqlite:///<project>/mlflow.db`): created whole, opened under a lock.

MLflow creates a new store's tables and indexes in many statements and migrates an old one in place; two
pipelines starting at once, or a kill between two statements, would leave a store every later run fails on. Here
a new store is made in a temporary sibling and renamed into place, with the store's folder locked (flock)."""

from __future__ import annotations

import os
from pathlib import Path

from tfpipe.errors import TrackingError
from tfpipe.tracking.backend import scheme


def init_store(uri: str) -> None:
    """Create (or migrate) a SQLite store while holding an exclusive lock on its folder.

    Two pipelines starting at once on a new mlflow.db (`dvc exp run --run-all --jobs 2`) would
    otherwise both create its tables and one fails ("table ... already exists"). Later calls in
    this process reuse MLflow's cached store. Other schemes: nothing to do (a server migrates
    its own database).
    """
    if scheme(uri) != "sqlite":
        return
    path = (uri.split(":///", 1)[1] if ":///" in uri else "").split("?", 1)[0]
    if not path or path.startswith(":memory:"):
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, as before
        fcntl = None  # type: ignore[assignment]  # the optional-module idiom: `if fcntl:` below tells them apart
    from mlflow import MlflowClient

    folder = os.open(Path(path).parent, os.O_RDONLY)
    try:
        if fcntl:
            fcntl.flock(folder, fcntl.LOCK_EX)
        if not Path(path).exists():
            _create_store(Path(path))
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as exc:  # opening the store raises SQLAlchemy's own OperationalError, not MLflow's
        if "database is locked" not in str(exc):
            raise
        raise TrackingError(
            f"MLflow store {path}: the database is locked by another program (SQLite waited and gave up); "
            "let it finish or stop it (a backup, `mlflow gc`, a DB browser), then run the same command again"
        ) from None
    finally:
        os.close(folder)  # releases the lock


def _create_store(db: Path) -> None:
    """A new SQLite store made whole beside `db` and renamed into place: MLflow creates its tables and indexes in
    many statements, and a store killed between two of them fails every later run ("index ... already exists")."""
    from mlflow import MlflowClient

    for stale in db.parent.glob(f".{db.name}.tmp-*"):  # an earlier attempt killed while creating it
        stale.unlink(missing_ok=True)
    staging = db.parent / f".{db.name}.tmp-{os.getpid()}"
    client = MlflowClient(tracking_uri=f"sqlite:///{staging}")
    client.search_experiments(max_results=1)
    engine = getattr(
        client._tracking_client.store, "engine", None
    )  # MLflow caches it per URI: close its files
    if engine is not None:
        engine.dispose()
    os.replace(staging, db)
