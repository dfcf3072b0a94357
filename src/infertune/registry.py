"""The one registry: engine and quantization names -> their declarations (infertune.catalog), imported lazily.
Third parties add engines through the `infertune.backends` entry-point group (value "package.module:Class");
those get the defaults of `catalog.Engine` (rank 1, no needs beyond their precision's, no offers)."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from infertune.catalog import ENGINES, PRECISION_NEEDS, QUANTS, Engine, Quant
from infertune.errors import InfertuneError


def _all() -> dict[str, str]:
    names = {name: e.target for name, e in ENGINES.items()}
    for ep in entry_points(group="infertune.backends"):
        names.setdefault(ep.name, ep.value)
    return names


def backend_names() -> list[str]:
    return sorted(_all())


def load(target: str) -> Any:
    """The attribute a "module:attr" string names."""
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def load_backend(name: str) -> Any:
    """Return the backend class registered under `name`."""
    target = _all().get(name)
    if target is None:
        raise InfertuneError(f"unknown backend {name!r}; known: {', '.join(backend_names())}")
    return load(target)


def engine(name: str) -> Engine:
    """The declaration of engine `name` (the defaults for one declared only through an entry point)."""
    return ENGINES.get(name) or Engine(target=_all().get(name, ""))


def quant(name: str) -> Quant | None:
    return QUANTS.get(name)


def requirements(cand, device: str) -> tuple[str, ...]:
    """The host capabilities a candidate needs on `device`: its precision's, its quantizer's and its engine
    options', in that order, each once."""
    out = list(PRECISION_NEEDS.get(cand.precision, {}).get(device, ()))
    if cand.quant in QUANTS:
        out += QUANTS[cand.quant].needs.get(device, ())
    for kv in cand.options:
        out += engine(cand.backend).option_needs.get(tuple(kv), ())
    return tuple(dict.fromkeys(out))


def simplicity(backend: str, quant_name: str | None) -> int:
    """The tie rule's rank (lower is simpler): the quantizer's rank (none: 0) plus the engine's."""
    q = 0 if not quant_name else QUANTS[quant_name].rank if quant_name in QUANTS else Quant.rank
    return q + engine(backend).rank


def quant_available(name: str, device: str) -> str | None:
    """None when quantizer `name` runs on `device` here, else why not (its module's `available`)."""
    q = QUANTS.get(name)
    if q is None:
        return f"unknown quantization {name!r}; known: {', '.join(QUANTS)}"
    return importlib.import_module(q.module).available(device, name)


def rescued(device: str) -> tuple[str, ...]:
    """The quantizers whose over-budget candidates the mixed-precision search can rescue on `device`."""
    return tuple(n for n, q in QUANTS.items() if device in q.rescue)


def search_methods(device: str) -> tuple[str, ...]:
    """The quantizers tasks/embedding/mixed.py measures per-layer sensitivity with on `device`."""
    return tuple(dict.fromkeys(q.rescue[device].search for q in QUANTS.values() if device in q.rescue))
