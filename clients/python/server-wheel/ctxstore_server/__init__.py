"""Where the ``ctxstore-server`` wheel put its two programs (they are on PATH too)."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

__all__ = ["binary", "PROGRAMS"]

PROGRAMS = ("ctxstore-server", "ctxstore")


def binary(name: str = "ctxstore-server") -> Path:
    """The installed program ``name`` (``ctxstore-server`` or ``ctxstore``)."""
    if name not in PROGRAMS:
        raise ValueError(f"the wheel holds {', '.join(PROGRAMS)}, not {name!r}")
    for scheme in (None, "posix_user"):
        scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        path = Path(scripts) / name
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(f"{name} is not installed next to this Python ({scripts})")
