"""What tune's fork server imports once, so each worker it forks starts in ~0.05 s instead of importing torch
and transformers again (~9 s of a 2-core box). Imported in the fork server only (worker.context()).

Nothing here may initialise CUDA: a process forked after that cannot use the GPU ("Cannot re-initialize CUDA
in forked subprocess"). It happens for real: torchao 0.18, which transformers' model code imports when it is
installed (its quantizer registry), calls `torch.cuda.current_device()` at import (through `has_triton()` in its
mx_formats kernels), and every GPU candidate failed that way (docs/measurements/2026-12-02-h200-torchao-installed).
So with a CUDA build of torch the server stops at torch, transformers' tokenizer side and our own code (85% of the
import time on a 2-core CPU), and each worker imports the model code itself; with a CPU build it imports
sentence-transformers too. CUDA_INITIALISED records what the imports did: a worker forked from a server where it
is True asks its parent to start it again with spawn (worker.py), so the check holds whatever a library does at
import."""

from __future__ import annotations

from infertune.logs import route_library_logs

route_library_logs()  # the imports below log on import; that goes to the run's log, not the terminal

import numpy  # noqa: E402,F401
import torch  # noqa: E402
import transformers  # noqa: E402,F401
from transformers import AutoConfig, AutoTokenizer  # noqa: E402,F401

import infertune.engines.base  # noqa: E402,F401

if not torch.backends.cuda.is_built():  # no GPU can be initialised: the model code too (0.9 s a worker here)
    import sentence_transformers  # noqa: F401

CUDA_INITIALISED: bool = torch.cuda.is_initialized()
