"""Options that several commands share, declared once (``Annotated`` types for typer).

Each command that reads MLflow or writes a study's files takes its option from here, so that
``--tracking-uri`` means the same thing, and says so the same way, under every command.
"""

from __future__ import annotations

from typing import Annotated

import typer

#: Where MLflow records are read from / written to when no option is given.
TRACKING_URI_DEFAULT = "$MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory"


def tracking_uri_option(default_words: str = TRACKING_URI_DEFAULT) -> typer.models.OptionInfo:
    """``--tracking-uri``: an MLflow tracking URI; ``default_words`` says what is used without it."""
    return typer.Option("--tracking-uri", help=f"MLflow tracking URI (default: {default_words}).")


#: ``--tracking-uri`` with the usual default (the environment, else a SQLite file here).
TrackingUri = Annotated[str | None, tracking_uri_option()]

#: ``--tracking-uri`` of a command that runs a study: the spec's ``tracking.uri`` comes first.
StudyTrackingUri = Annotated[str | None, tracking_uri_option(f"the spec's tracking.uri, {TRACKING_URI_DEFAULT}")]
