"""What a served causal-LM candidate is, and which ones to try here: a checkpoint (the unquantized model, or a
quantized one made by llm-compressor from the workload's calibration split) and the vLLM engine arguments it
is started with. The checkpoints come from quantize/llm_checkpoint_rules (which scheme has a kernel on this GPU or CPU);
the engine settings are searched on the best checkpoint once the probes have run."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from infertune.tuning.task import Option

REFERENCE = "bf16"  # the unquantized checkpoint, served in the host's 16-bit type


class ServedCandidate(BaseModel):
    """A checkpoint x vLLM engine arguments. `checkpoint` is REFERENCE or a checkpoint_rules scheme id."""

    model_config = ConfigDict(frozen=True)
    backend: str = "vllm"
    checkpoint: str = REFERENCE
    args: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return "/".join(["vllm", self.checkpoint, *settings_names(self.args)])

    @property
    def engine_id(self) -> str:
        return self.id

    def with_args(self, *args: str) -> ServedCandidate:
        return self.model_copy(update={"args": self.args + tuple(args)})


def settings_names(args: tuple[str, ...]) -> list[str]:
    """('--max-num-seqs', '4', '--no-enable-prefix-caching') -> ['max-num-seqs=4', 'no-enable-prefix-caching']."""
    out: list[str] = []
    for a in args:
        if a.startswith("--"):
            out.append(a[2:])
        elif out:
            out[-1] += f"={a}"
    return out


PRIOR = {"w4a16": 1.6, "int8-w8a8": 1.3, "fp8-dynamic": 1.5}  # decode reads the weights: fewer bytes, more req/s


def checkpoint_options(caps, quick: bool = False) -> list[Option]:
    """The reference (vLLM's defaults on the unquantized checkpoint) and one option per quantization scheme: a
    scheme dropped on this host is still listed, and the task's availability check says why it is skipped."""
    from infertune.quantize.llm_checkpoint_rules import options as rules

    out = [Option(ServedCandidate(), "vLLM's defaults on the unquantized checkpoint: the accuracy reference and the "
                                     "baseline every goodput is compared with", 1.0, role="reference")]
    for r in rules(caps):
        prior = PRIOR.get(r.scheme, 1.2) * (0.6 if r.slower else 1.0)
        why = f"{r.label} checkpoint on {r.kernel}: {r.reason}" if r.kernel else r.reason
        out.append(Option(ServedCandidate(checkpoint=r.scheme), why, prior))
    return out


def settings_options(best: ServedCandidate, caps, concurrency: int, quick: bool,
                     prompt_p90: int) -> list[Option]:
    """Engine settings worth a server start on the best checkpoint, each with why it may help this workload.

    - `--max-num-batched-tokens`: a smaller prefill chunk per step, so a long prompt arriving mid-decode stalls
      the running requests' next token less (TPOT P99) at some TTFT cost; tried at 256 tokens, or the workload's
      P90 prompt when that is larger.
    - `--max-num-seqs` = the workload's concurrency (not in --quick): a running batch no larger than the traffic
      keeps each decode step short when requests queue in the SLO search's open loop.
    - prefix caching off (not in --quick): hashing every block costs a little per request, and pays only when
      prompts share prefixes.
    - `--kv-cache-dtype fp8` on GPUs whose attention backend takes it: half the KV bytes per decode step.
    """
    from infertune.quantize.llm_checkpoint_rules import kv_cache_fp8

    chunk = max(256, 1 << max(prompt_p90 - 1, 1).bit_length())
    out = [Option(best.with_args("--max-num-batched-tokens", str(chunk)),
                  f"prefill in chunks of {chunk} tokens: a long prompt delays the running requests' next tokens "
                  "less (TPOT P99), its own first token more", 1.05)]
    if not quick:  # each setting is a server start (~1.5 min with compile on 2 cores) and an SLO search
        out += [Option(best.with_args("--max-num-seqs", str(max(1, concurrency))),
                       f"at most {concurrency} sequences per step (the workload's concurrency): shorter decode steps "
                       "when requests queue", 1.02),
                Option(best.with_args("--no-enable-prefix-caching"),
                       "no prefix-cache hashing per block: pays when prompts share no prefixes", 1.0)]
    kv = kv_cache_fp8(caps)
    if kv.status == "candidate":
        out.append(Option(best.with_args("--kv-cache-dtype", "fp8"), f"FP8 KV cache on {kv.kernel}: half the KV "
                          f"bytes per decode step ({kv.reason})", 1.1))
    return out


__all__ = ["ServedCandidate", "REFERENCE", "checkpoint_options", "settings_options", "settings_names"]
