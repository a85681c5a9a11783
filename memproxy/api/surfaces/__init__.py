"""The API surfaces: one module each (``chat``, ``responses``, ``messages``, ``completions``),
holding its ``Surface`` as ``SURFACE`` and, when it has routes beyond its POST, a ``router``.

``discover`` finds them by listing this package, so adding a surface is adding a module.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from fastapi import APIRouter

from memproxy.api.surface import Surface


@dataclass(frozen=True)
class Found:
    surface: Surface
    router: APIRouter | None  # the module's other routes (e.g. ``GET /v1/responses/{id}``)


def discover() -> list[Found]:
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        surface = getattr(module, "SURFACE", None)
        if isinstance(surface, Surface):
            found.append(Found(surface, getattr(module, "router", None)))
    return found
