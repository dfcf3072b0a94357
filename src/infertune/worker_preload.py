"""What tune's fork server imports once, so each worker it forks starts in ~0.05 s instead of importing torch
and transformers again (~9 s of a 2-core box). Imported in the fork server only (worker.context()).

It also records whether those imports initialised CUDA. A process forked after that cannot use the GPU
("Cannot re-initialize CUDA in forked subprocess"), and it happens for real: torchao 0.18, which transformers'
quantizer registry imports when it is installed, calls `torch.cuda.current_device()` at import (through
`has_triton()` in its mx_formats kernels). Every H200 candidate failed that way in 21 s. A forked worker reads
CUDA_INITIALISED and asks its parent to start it again with spawn (worker.py)."""

from __future__ import annotations

from infertune.logs import route_library_logs

route_library_logs()  # the imports below log on import; that goes to the run's log, not the terminal

import numpy  # noqa: E402,F401
import torch  # noqa: E402

route_library_logs()  # torch put its own stderr handler back on its logger
import sentence_transformers  # noqa: E402,F401
import transformers  # noqa: E402,F401

import infertune.backends.base  # noqa: E402,F401

CUDA_INITIALISED: bool = torch.cuda.is_initialized()
