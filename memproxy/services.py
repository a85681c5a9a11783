"""The long-lived parts of one running app, built in ``app.lifespan`` and torn down there.

Invariant: nothing here exists before the lifespan starts; routes reach it through
``deps`` (``request.app.state.services``), never through module globals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memproxy.auth import Authenticator
from memproxy.config import Settings
from memproxy.upstream import Upstream


@dataclass
class Services:
    settings: Settings
    auth: Authenticator
    upstream: Upstream
    # Flipped by the lifespan once every part has started; read by /readyz.
    ready: bool = False
    background_errors: list[str] = field(default_factory=list)
