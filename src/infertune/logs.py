"""Where third-party chatter goes: library loggers and Python warnings are written to a log file, not to the
terminal a person reads. torchao 0.18, imported by transformers' quantizer registry, logs two "Failed to load
...so" lines and torch logs a dozen `_pytree.py ... deprecated` warnings; a newcomer's `make demo` showed them
before the first progress line. They say nothing about the user's run, but a bug report may need them.

The file is `INFERTUNE_LOG` when set (tune sets it to `<out>/libraries.log` before it starts any worker, and
workers and the fork server inherit it), else `~/.cache/infertune/libraries.log`. The CLI sets
INFERTUNE_QUIET_LIBRARIES=1, so every process it starts (serve's frontends and engines, tokenizer processes: spawned
children import `infertune` first) routes its libraries' logs as it imports infertune; a library caller's own
`import infertune` changes no logging."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
from pathlib import Path

ENV = "INFERTUNE_LOG"
ENV_ON = "INFERTUNE_QUIET_LIBRARIES"
# the libraries whose loggers print on import or per call; their children propagate to these
LIBRARIES = ("torch", "torchao", "transformers", "sentence_transformers", "accelerate", "huggingface_hub",
             "nncf", "openvino", "onnxruntime", "onnxscript", "optimum", "py.warnings")
_ROUTED: tuple[Path | None, logging.Handler] | None = None


def library_log() -> Path:
    got = os.environ.get(ENV)
    return Path(got) if got else Path.home() / ".cache" / "infertune" / "libraries.log"


@contextlib.contextmanager
def native_stderr_to_log():
    """Within the block, what native code writes to file descriptor 2 goes to the library log (kineto prints
    "USDT: ... profiler_start" lines there from C++, past Python's logging), where the libraries' logs are routed
    (INFERTUNE_QUIET_LIBRARIES); elsewhere, or when the file cannot be opened, nothing changes."""
    if not os.environ.get(ENV_ON) or _ROUTED is None or _ROUTED[0] is None:
        yield
        return
    try:
        fd = os.open(_ROUTED[0], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


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
    _after_torch_import(handler)
    return path


class _AfterTorch:
    """A meta-path finder that lets torch import as usual, then puts `handler` back on its loggers: torch's own
    import gives its 'torch' logger a stderr handler (torch._logging), and the _pytree warnings torchao causes
    reach the terminal through it. It stays until torch has really been imported: a library that only asks
    whether torch exists (`importlib.util.find_spec`) discards the spec it got."""

    def __init__(self, handler: logging.Handler):
        self.handler, self.busy = handler, False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self.busy:  # first: this runs for every import of the process
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run, handler, me = spec.loader.exec_module, self.handler, self

        def exec_module(module):
            run(module)
            if me in sys.meta_path:
                sys.meta_path.remove(me)
            _attach(_ROUTED[1] if _ROUTED is not None else handler)  # the file routed to last

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _after_torch_import(handler: logging.Handler) -> None:
    if "torch" in sys.modules:
        return
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterTorch)]
    sys.meta_path.insert(0, _AfterTorch(handler))


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
    # handler stays quiet (the root's other handlers, a test's log capture say, are left alone)
    root = logging.getLogger()
    if handler not in root.handlers:
        root.addHandler(handler)
