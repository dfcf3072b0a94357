"""How a process that runs an engine starts: its torch threads, and the libraries' logs and progress bars routed
away from the user's terminal. tune's workers, verify and serve --verify set up the same way."""

from __future__ import annotations

import os


def setup(threads: int | None, device: str = "cpu") -> None:
    # On a GPU host the tokenizer is the bottleneck and spare cores are plenty: let it use them.
    # On CPU it would steal cores from the model.
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if device == "cuda" else "false"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from infertune.logs import route_library_logs

    route_library_logs()
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:  # noqa: BLE001
        pass
    import torch

    if threads:
        torch.set_num_threads(threads)
