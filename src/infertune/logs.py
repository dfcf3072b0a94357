"""Where third-party chatter goes: library loggers and Python warnings are written to a log file, not to the
terminal a person reads. torchao 0.18, imported by transformers' quantizer registry, logs two "Failed to load
...so" lines and torch logs a dozen `_pytree.py ... deprecated` warnings; a newcomer's `make demo` showed them
before the first progress line. They say nothing about the user's run, but a bug report may need them.

The file is `INFERTUNE_LOG` when set (tune sets it to `<out>/libraries.log` before it starts any worker, and
workers and the fork server inherit it), else `~/.cache/infertune/libraries.log`."""

from __future__ import annotations

import logging
import os
from pathlib import Path

ENV = "INFERTUNE_LOG"
# the libraries whose loggers print on import or per call; their children propagate to these
LIBRARIES = ("torch", "torchao", "transformers", "sentence_transformers", "accelerate", "huggingface_hub",
             "nncf", "openvino", "onnxruntime", "onnxscript", "optimum", "py.warnings")
_ROUTED: tuple[Path | None, logging.Handler] | None = None


def library_log() -> Path:
    got = os.environ.get(ENV)
    return Path(got) if got else Path.home() / ".cache" / "infertune" / "libraries.log"


def route_library_logs(path: Path | None = None) -> Path | None:
    """Send the LIBRARIES' log records (WARNING and up) and Python warnings to `path` (default: library_log())
    instead of stderr. Safe to call again: a second call with the same file changes nothing. Returns the file,
    or None when it cannot be opened (then the records are dropped rather than shown)."""
    global _ROUTED
    import warnings

    path = Path(path) if path is not None else library_log()
    if _ROUTED is not None and _ROUTED[0] == path:
        _attach(_ROUTED[1])  # a library imported since may have put its own stderr handler back
        return path
    handler: logging.Handler
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8", delay=True)
        handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"))
    except OSError:
        handler, path = logging.NullHandler(), None
    logging.captureWarnings(True)
    warnings.simplefilter("default")  # each distinct warning once per place, into py.warnings -> the file
    if _ROUTED is not None:  # routed before to another file (a worker forked from an earlier run's server)
        logging.getLogger().removeHandler(_ROUTED[1])
        _ROUTED[1].close()
    _attach(handler)
    _ROUTED = (path, handler)
    return path


def _attach(handler: logging.Handler) -> None:
    """`handler` alone on each library logger. torch replaces the handlers of its 'torch' logger with a stderr
    one when it is imported (torch._logging), so this runs again after torch's import."""
    for name in LIBRARIES:
        log = logging.getLogger(name)
        for h in list(log.handlers):
            if h is not handler:
                log.removeHandler(h)
        if handler not in log.handlers:
            log.addHandler(handler)
        log.propagate = False
        if log.level == logging.NOTSET or log.level > logging.WARNING:
            log.setLevel(logging.WARNING)
    # any other library's records reach the root logger; with a handler there, Python's last-resort stderr
    # handler stays silent (the root's other handlers, a test's log capture say, are left alone)
    root = logging.getLogger()
    if handler not in root.handlers:
        root.addHandler(handler)
