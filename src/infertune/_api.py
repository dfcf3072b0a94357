"""The public functions `infertune.tune(...)`, `infertune.bench(...)`, ... and why they are objects.

Each command is a function in a module (`infertune.bench.runner:bench`), but its documented name is also
the name of a subpackage (`infertune.bench`). Python's import system binds the *submodule* to the package
attribute as soon as anything imports it (`import infertune.bench.config` does), so a plain lazy
`__getattr__` loses: `infertune.bench(cfg)` then calls a module. Here the names table wins instead:

- `infertune.<name>` is a `Command`: calling it calls the function (imported on the first call), and any
  other attribute is looked up on the subpackage, so `infertune.bench.config.BenchConfig`,
  `import infertune.bench.runner as r` and `mock.patch("infertune.bench.runner.x")` keep working;
- the `infertune` package module refuses to let the import system replace a Command with the submodule
  (`_Package.__setattr__`); `sys.modules["infertune.bench"]` stays the plain, non-callable module.

Nothing heavy is imported until a command is called or one of its modules is used.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

# name -> (function "module:attr", the subpackage/module that shares the name or None)
COMMANDS: dict[str, tuple[str, str | None]] = {
    "tune": ("infertune.tune:tune", "infertune.tune"),
    "serve": ("infertune.serve.app:serve", "infertune.serve"),
    "bench": ("infertune.bench.runner:bench", "infertune.bench"),
    "doctor": ("infertune.doctor.checks:doctor", "infertune.doctor"),
    "plan": ("infertune.plan.planner:plan", "infertune.plan"),
    "validate": ("infertune.validate.runner:validate", "infertune.validate"),
    "deploy": ("infertune.deploy.emit:deploy", "infertune.deploy"),
    "export": ("infertune.export.run:export", "infertune.export"),
    "verify": ("infertune.tasks.embedding.reverify:verify", None),
    "inspect_model": ("infertune.inspect:inspect_model", None),
    "explain": ("infertune.doctor.explain:explain", None),
}


def resolve(target: str) -> Any:
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


class Command:
    """`infertune.<name>(config)`: the function; `infertune.<name>.<attr>`: the module of that name."""

    __slots__ = ("_name", "_target", "_module")

    def __init__(self, name: str, target: str, module: str | None) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_module", module)

    @property
    def function(self) -> Any:
        return resolve(self._target)

    @property
    def __wrapped__(self) -> Any:  # inspect.signature(infertune.bench) and help() see the function
        return resolve(self._target)

    @property
    def __doc__(self) -> str | None:  # type: ignore[override]
        return resolve(self._target).__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from infertune.extras import require

        require(self._name)  # a missing extra: InfertuneError naming the pip install, not a deep ImportError
        return resolve(self._target)(*args, **kwargs)

    def _mod(self) -> types.ModuleType:
        if self._module is None:
            raise AttributeError(f"infertune.{self._name} is a function ({self._target}), not a module")
        return importlib.import_module(self._module)

    def __getattr__(self, attr: str) -> Any:
        if attr in Command.__slots__:  # not set yet (copy, unpickling): no recursion through _mod()
            raise AttributeError(attr)
        if attr in ("__name__", "__qualname__", "__annotations__"):
            return getattr(resolve(self._target), attr)
        mod = self._mod()
        try:
            return getattr(mod, attr)
        except AttributeError:
            pass
        try:  # a submodule not imported yet: infertune.bench.runner works like `import infertune.bench.runner`
            return importlib.import_module(f"{mod.__name__}.{attr}")
        except ModuleNotFoundError as e:
            if e.name != f"{mod.__name__}.{attr}":
                raise
        raise AttributeError(f"infertune.{self._name} has no attribute {attr!r}")

    def __setattr__(self, attr: str, value: Any) -> None:  # monkeypatch.setattr(infertune.bench, ...)
        if attr in Command.__slots__:
            object.__setattr__(self, attr, value)
            return
        setattr(self._mod(), attr, value)

    # one Command per name: copies and pickles are the package's own
    def __copy__(self) -> Command:
        return self

    def __deepcopy__(self, memo: dict) -> Command:
        return self

    def __reduce__(self) -> tuple:
        return _command, (self._name,)

    def __delattr__(self, attr: str) -> None:
        delattr(self._mod(), attr)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._mod()) if self._module else []) | {"function"})

    def __repr__(self) -> str:
        return f"<infertune function {self._name} ({self._target})>"


def _command(name: str) -> Command:
    import infertune

    return getattr(infertune, name)


class _Package(types.ModuleType):
    """The `infertune` module: a submodule import does not replace a Command of the same name."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in COMMANDS and isinstance(value, types.ModuleType) and isinstance(self.__dict__.get(name), Command):
            return
        super().__setattr__(name, value)
