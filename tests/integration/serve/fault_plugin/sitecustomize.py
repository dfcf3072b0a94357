"""Test-only fault injection for the serve tests, in the loaded model of a real server:
- INFERTUNE_TEST_FAULT_MARKER: a batch holding the marker's tokens fails its forward pass;
- INFERTUNE_TEST_NAN_MARKER: the pooled row of every input holding the marker's tokens comes out NaN (an engine
  whose fp16 activations overflow on some inputs).
Python imports this module at start-up when its folder is on PYTHONPATH, in the server under test and in every
process that server spawns, so no product code knows about faults. serve_helpers.fault_env() gives the
environment that turns them on."""

import os

_FAULT = os.environ.get("INFERTUNE_TEST_FAULT_MARKER")
_NAN = os.environ.get("INFERTUNE_TEST_NAN_MARKER")


def _holds(row: list[int], part: list[int]) -> bool:
    n = len(part)
    return any(row[i:i + n] == part for i in range(len(row) - n + 1))


def _tokens(emb, marker: str) -> list[int]:
    """The marker's own token ids: without the special tokens the tokenizer adds to every text."""
    tok = emb.tokenizer
    special = {getattr(tok, "cls_token_id", None), getattr(tok, "sep_token_id", None),
               getattr(tok, "bos_token_id", None), getattr(tok, "eos_token_id", None), *emb.token_ids([""])[0]}
    return [i for i in emb.token_ids([marker])[0] if i not in special]


class _Tagged:
    """A launched batch whose rows `nan` are to come out NaN when collected."""

    def __init__(self, handle, nan):
        self.handle, self.nan = handle, nan


def _wrap(emb, fault, nan) -> None:
    def rows_with(batch, part) -> list[int]:
        return [r for r, row in enumerate(batch["input_ids"].tolist()) if _holds(row, part)]

    def check(batch) -> None:
        if fault and rows_with(batch, fault):
            raise RuntimeError("injected fault (INFERTUNE_TEST_FAULT_MARKER)")

    def poison(rows, bad):
        if bad:
            rows = rows.copy()
            rows[bad] = float("nan")
        return rows

    real_forward, real_launch, real_collect = emb.forward, emb.launch, emb.collect

    def forward(batch):
        check(batch)
        return poison(real_forward(batch), rows_with(batch, nan) if nan else [])

    def launch(batch):
        check(batch)
        return _Tagged(real_launch(batch), rows_with(batch, nan) if nan else [])

    def collect(handle):
        if isinstance(handle, _Tagged):
            return poison(real_collect(handle.handle), handle.nan)
        return real_collect(handle)

    emb.forward, emb.launch, emb.collect = forward, launch, collect


def _install() -> None:
    import infertune.engines.embedding_artifact as artifact

    real_load = artifact.load_model

    def load_model(*args, **kwargs):
        emb = real_load(*args, **kwargs)
        _wrap(emb, _tokens(emb, _FAULT) if _FAULT else None, _tokens(emb, _NAN) if _NAN else None)
        return emb

    artifact.load_model = load_model


if _FAULT or _NAN:
    _install()
