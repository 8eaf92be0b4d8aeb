"""Ray's token authentication (Ray 2.60) for clients the harness creates.

Ray turns token mode on by itself for ``ray.init()`` / ``"auto"`` when a token is
available (``$RAY_AUTH_TOKEN``, ``$RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``), but
never for an explicit address, and ``ray job submit`` / the Jobs SDK present the token only
when ``RAY_AUTH_MODE=token`` is set. The harness applies Ray's own rule to every client
it creates (``harness run --address``, ``harness submit``).
"""

from __future__ import annotations

import logging
import os


def enable_token_auth_if_available() -> None:
    """Set ``RAY_AUTH_MODE=token`` for this process when a token is available and the user
    set no mode. A token client also connects to a cluster without authentication
    (verified with Ray 2.60), so this only turns failures into successes."""
    if os.environ.get("RAY_AUTH_MODE"):
        return
    # Ray says at WARNING level that token mode is on; that is the safe default, not news.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    # Ray's own rule is private (Ray 2.60); tests/studies/test_studies_ray_internals.py fails
    # when it moves.
    try:
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
    except ImportError:  # another Ray version: the user sets RAY_AUTH_MODE themselves
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
