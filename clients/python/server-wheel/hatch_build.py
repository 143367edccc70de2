"""Hatchling build hook: puts the prebuilt ctxstore-server and ctxstore binaries into the
wheel as scripts (installed on PATH) and tags the wheel for this platform.

The binaries come from the directory in $CTXSTORE_WHEEL_BIN_DIR (build-server-wheel.sh sets
it). The tag: manylinux_2_N for the newest glibc symbol version the binaries need, when they
link nothing beyond what the manylinux policy allows (libc, libm, libgcc_s, the loader);
else plain linux_ARCH, which pip installs locally but an index would refuse.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PROGRAMS = ("ctxstore-server", "ctxstore")
MANYLINUX_LIBS = {
    "libc.so.6", "libm.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2",
    "librt.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
}


def _platform_tag(binaries: list[Path]) -> str:
    arch = platform.machine()
    glibc_minor = 0
    for path in binaries:
        data = path.read_bytes()
        for match in re.finditer(rb"GLIBC_2\.([0-9]+)", data):
            glibc_minor = max(glibc_minor, int(match.group(1)))
        if shutil.which("readelf") is None:
            return f"linux_{arch}"
        dynamic = subprocess.run(
            ["readelf", "-d", str(path)], capture_output=True, text=True, check=True
        ).stdout
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))
        if not needed <= MANYLINUX_LIBS:
            return f"linux_{arch}"
    if glibc_minor < 17:
        return f"linux_{arch}"
    return f"manylinux_2_{glibc_minor}_{arch}"


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            raise RuntimeError("ctxstore-server is built as a wheel only (the binaries)")
        bin_dir = os.environ.get("CTXSTORE_WHEEL_BIN_DIR")
        if not bin_dir:
            raise RuntimeError("set CTXSTORE_WHEEL_BIN_DIR (build-server-wheel.sh does)")
        binaries = [Path(bin_dir) / name for name in PROGRAMS]
        for path in binaries:
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise RuntimeError(f"no executable {path}")
            build_data["shared_scripts"][str(path)] = path.name
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{_platform_tag(binaries)}"
