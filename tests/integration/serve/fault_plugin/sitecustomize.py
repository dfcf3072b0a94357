"""Test-only fault injection for the serve tests: a batch holding the tokens of INFERTUNE_TEST_FAULT_MARKER fails
its forward pass. Python imports this module at start-up when its folder is on PYTHONPATH, in the server under test
and in every process that server spawns, so no product code knows about faults. serve_helpers.fault_env() gives
the environment that turns it on."""

import os

_MARKER = os.environ.get("INFERTUNE_TEST_FAULT_MARKER")


def _holds(row: list[int], part: list[int]) -> bool:
    n = len(part)
    return any(row[i:i + n] == part for i in range(len(row) - n + 1))


def _install(marker: str) -> None:
    import infertune.tasks.embedding.artifact as artifact

    real_load = artifact.load_model

    def load_model(*args, **kwargs):
        emb = real_load(*args, **kwargs)
        ids = emb.token_ids([marker])[0]
        special = {getattr(emb.tokenizer, "cls_token_id", None), getattr(emb.tokenizer, "sep_token_id", None),
                   getattr(emb.tokenizer, "bos_token_id", None), getattr(emb.tokenizer, "eos_token_id", None)}
        part = [i for i in ids if i not in special]

        def check(batch) -> None:
            if any(_holds(row, part) for row in batch["input_ids"].tolist()):
                raise RuntimeError("injected fault (INFERTUNE_TEST_FAULT_MARKER)")

        for name in ("forward", "launch"):
            real = getattr(emb, name)

            def wrapped(batch, _real=real):
                check(batch)
                return _real(batch)

            setattr(emb, name, wrapped)
        return emb

    artifact.load_model = load_model


if _MARKER:
    _install(_MARKER)
