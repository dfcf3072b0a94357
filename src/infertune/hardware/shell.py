"""Run a host command or read a host file, None when the tool or file is missing: the primitives every host probe
(GPUs here, the doctor's checks) is built on, so a missing tool never stops a report."""

from __future__ import annotations

import shutil
import subprocess


def run(cmd: list[str], timeout: float = 15) -> tuple[int, str, str] | None:
    """(returncode, stdout, stderr), or None when the program does not exist or hangs."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.returncode, p.stdout, p.stderr


def read_text(path: str) -> str | None:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None
