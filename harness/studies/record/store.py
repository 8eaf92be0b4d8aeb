"""The tracking store of one study's record, made safe: every MLflow call of the record goes
through :meth:`RecordStore.safely`, and after the first failure the store warns once and turns
every later call into a no-op (the study itself goes on, its results kept in its storage).

Every call goes through :class:`harness.mlflow_client.TrackingClient`, whose HTTP policy (the
one of ``harness train`` too) makes a dead server's first failure cost about 0.2 s, not a stall
of Tune's driver loop.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.datasets.mlflow_datasets import corpus_inputs
from harness.errors import InputError
from harness.mlflow_client import TrackingClient, check_tracking_uri, ensure_experiment, is_server_uri, redact_uri


def _print_warning(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


class RecordStore:
    """The study's experiment in the tracking store at ``tracking_uri``, and whether the store
    still answers (:attr:`broken` says why not)."""

    def __init__(self, tracking_uri: str, experiment: str, *, warn: Callable[[str], None] | None = None) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.experiment_id: str | None = None
        self.broken: str | None = None  # why MLflow calls stopped
        self._warn = warn or _print_warning
        self._client: TrackingClient | None = None
        self._inputs: dict[str, list[Any]] = {}  # corpus name -> its MLflow dataset inputs

    # pickling (Tune stores its callbacks): live clients stay behind
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        state["_warn"] = None
        state["_inputs"] = {}
        # Tune pickles its callbacks into the study directory (tuner.pkl); a resumed study
        # replaces them with fresh ones, so the stored copy needs no credentials.
        state["tracking_uri"] = redact_uri(self.tracking_uri)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._warn = _print_warning

    @property
    def client(self) -> TrackingClient:
        if self._client is None:
            self._client = TrackingClient(self.tracking_uri)
        return self._client

    @property
    def active(self) -> bool:
        return self.broken is None and self.experiment_id is not None

    def fail(self, what: str, exc: BaseException) -> None:
        """Record that the store failed while doing ``what``: the first failure is warned
        about (once) and :attr:`broken` set, after which every MLflow call is a no-op."""
        if self.broken is None:
            self.broken = f"{type(exc).__name__}: {exc}"
            self._warn(
                f"MLflow at {redact_uri(self.tracking_uri)} failed while {what} ({self.broken}). The study "
                "goes on without "
                "MLflow; every result is kept in the study's storage directory (results.parquet, Tune's trial "
                "results). Record it in MLflow later with `harness report` once the store is back (the "
                "command is printed "
                "when the study ends)."
            )

    def safely(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, or None when the store is not active or ``fn`` fails (:meth:`fail`)."""
        if not self.active:
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a tracking failure must not kill the study
            self.fail(what, exc)
            return None

    def connect(self) -> None:
        """Check the URI and get or create the experiment (no run is created).

        Raises :class:`InputError` for URIs that cannot work (a file store, a SQLite
        database in a missing or read-only directory); an unreachable server is warned
        about and the study runs without MLflow."""
        check_tracking_uri(self.tracking_uri)
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "Creating initial tables..."
        try:
            self.experiment_id = ensure_experiment(
                self.client,
                self.tracking_uri,
                self.experiment,
                deleted_hint="restore it (mlflow experiments restore) or set tracking.experiment in the spec",
            )
        except InputError:
            raise
        except Exception as exc:  # an unreachable server: run without MLflow; anything else is a bad URI
            if is_server_uri(self.tracking_uri):
                self.experiment_id = None
                self.broken = f"{type(exc).__name__}: {exc}"

                self._warn(
                    f"cannot reach the MLflow tracking server {redact_uri(self.tracking_uri)} "
                    f"({self.broken}). The study runs "
                    "without MLflow; results are kept in its storage directory. Record them in MLflow later with "
                    "`harness report` once the server is up (the command is printed when the study ends)."
                )
                return
            raise InputError(f"cannot use tracking URI {self.tracking_uri!r}: {type(exc).__name__}: {exc}") from exc

    def complete_params(self, run_id: str, have: set[str], params: Mapping[str, Any]) -> set[str]:
        """Log the ``params`` a continued run lacks (``have``: the keys it holds); returns the
        keys it holds now. A run is created, then given its params: when the store goes away
        between the two calls, the run exists without them, and continuing it (a resume,
        ``harness report``) must finish its record, not skip it."""
        missing = {key: value for key, value in params.items() if key not in have}
        if missing:
            self.client.log_params(run_id, missing)
        return have | set(missing)

    def declare_corpora(self, run_id: str, names: Sequence[str], data_dir: str | None, what: str) -> None:
        """The corpora ``names`` as dataset inputs of run ``run_id`` (MLflow keeps each input once)."""
        inputs = self._corpus_inputs(names, data_dir)
        if inputs:
            self.safely(what, lambda: self.client.log_inputs(run_id, datasets=inputs))

    def _corpus_inputs(self, names: Sequence[str], data_dir: str | None) -> list[Any]:
        """The MLflow dataset inputs of the corpora ``names`` (built once per corpus: see
        :mod:`harness.datasets.mlflow_datasets`). A corpus that cannot be described is
        warned about and left out: a declaration is context, never a reason to stop recording."""
        inputs = []
        for name in dict.fromkeys(names):
            if name not in self._inputs:
                try:
                    self._inputs[name] = corpus_inputs([name], data_dir=data_dir)
                except Exception as exc:  # noqa: BLE001 - see the docstring
                    self._warn(f"corpus {name} is not declared as an MLflow dataset ({type(exc).__name__}: {exc})")
                    self._inputs[name] = []
            inputs.extend(self._inputs[name])
        return inputs
