"""What this host can do: CPU instruction sets, cores, memory, GPUs. Read by tune (which candidates
make sense here), doctor and plan. Detection is plain data; the rules that turn it into candidates live
with each task (`infertune.tasks.*.candidates`)."""

from infertune.hardware.capabilities import CPU, GPU, Capabilities, detect, needs

__all__ = ["CPU", "GPU", "Capabilities", "detect", "needs"]
