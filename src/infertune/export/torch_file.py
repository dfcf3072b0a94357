"""What a .pt / .pth file holds, and how to load it without running code from it.

Three kinds, told apart without unpickling anything that is not plain data:
- TorchScript (torch.jit.save): a zip archive with a `code/` folder and constants.pkl; torch.jit.load reads it,
  and the graph is the model, so it exports as it is;
- a state_dict (torch.save(model.state_dict())): tensors by name, which torch.load(weights_only=True) reads
  safely; it has no architecture, so it needs the model's config directory (--config DIR);
- a pickled model object (torch.save(model)): unpickling it runs whatever code the file names, so it is refused
  with the way out (re-save as TorchScript or a state_dict, or save_pretrained).
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path
from typing import Any, Literal

from infertune.errors import InfertuneError

Kind = Literal["torchscript", "state_dict", "pickled-model"]
RESAVE = ("re-save it as TorchScript (torch.jit.trace(model, example_inputs).save('model.pt')), or as weights "
          "(torch.save(model.state_dict(), 'weights.pt')) and pass --config with the model's config directory, "
          "or model.save_pretrained(DIR) and pass DIR")


def kind_of(path: Path) -> tuple[Kind, str]:
    """(kind, one sentence of evidence)."""
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError):
        names = []
    if any("/code/" in n for n in names) or any(n.endswith("constants.pkl") for n in names):
        return "torchscript", "a TorchScript archive (code/ and constants.pkl inside)"
    import pickle

    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        named = str(e).split("GLOBAL", 1)[-1].split()[0].strip(".:") if "GLOBAL" in str(e) else "a Python object"
        return "pickled-model", f"a pickled Python object ({named})"
    except Exception as e:  # noqa: BLE001 - not a torch file at all
        raise InfertuneError(f"{path} is not a file torch can read ({type(e).__name__}: {str(e)[:120]})") from e
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]  # a training checkpoint: {"state_dict": ..., "epoch": ...}
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return "state_dict", f"a state_dict ({len(obj)} tensors, no architecture)"
    raise InfertuneError(f"{path} holds {type(obj).__name__}, neither a TorchScript model nor a state_dict of "
                         f"tensors; {RESAVE}")


def refuse_pickled(path: Path, evidence: str) -> None:
    raise InfertuneError(f"{path} is {evidence}: loading it would unpickle it, which runs any code the file "
                         f"names (unsafe), so infertune does not; {RESAVE}")


def load_state_dict(path: Path) -> dict[str, Any]:
    import torch

    obj = torch.load(path, map_location="cpu", weights_only=True)
    return obj["state_dict"] if "state_dict" in obj and isinstance(obj["state_dict"], dict) else obj


def _strip_prefix(sd: dict[str, Any], wanted: set[str]) -> dict[str, Any]:
    """Keys saved from a wrapper (`model.`, `bert.`, `0.auto_model.`): drop the shortest prefix that makes them
    match the model's own names."""
    if set(sd) & wanted:
        return sd
    for k in sorted(sd, key=len):
        for cut in range(1, k.count(".") + 1):
            prefix = k.split(".", cut)[:cut]
            p = ".".join(prefix) + "."
            stripped = {key[len(p):]: v for key, v in sd.items() if key.startswith(p)}
            if set(stripped) & wanted:
                return stripped
        break
    return sd


def state_dict_model_dir(path: Path, config_dir: Path | None) -> Path:
    """A Hugging Face directory (config + these weights + the tokenizer) built from a state_dict and the
    architecture in `config_dir`, cached by content so export, tune and serve read the same files."""
    if config_dir is None:
        raise InfertuneError(f"{path} is a state_dict (weights without an architecture): pass --config DIR, the "
                             "model's Hugging Face directory or one with its config.json and tokenizer files")
    config_dir = Path(config_dir).expanduser()
    if config_dir.is_file():
        config_dir = config_dir.parent
    if not (config_dir / "config.json").exists():
        raise InfertuneError(f"--config {config_dir}: no config.json there; pass the model's directory")
    from infertune.models.random_weights import cache_root, save_model_dir

    h = hashlib.sha256(path.read_bytes() + (config_dir / "config.json").read_bytes()).hexdigest()[:16]
    out = cache_root() / "state_dict" / h
    if (out / "model.safetensors").exists():
        return out
    from transformers import AutoConfig, AutoModel

    model = AutoModel.from_config(AutoConfig.from_pretrained(config_dir))
    own = model.state_dict()
    sd = _strip_prefix(load_state_dict(path), set(own))
    missing = sorted(set(own) - set(sd) - {k for k in own if k.endswith("position_ids")})
    unexpected = sorted(set(sd) - set(own))
    if missing or unexpected:
        raise InfertuneError(f"{path} does not fit the architecture in {config_dir}: {len(missing)} weights missing "
                             f"(e.g. {', '.join(missing[:3]) or '-'}), {len(unexpected)} unexpected (e.g. "
                             f"{', '.join(unexpected[:3]) or '-'}); pass the --config the weights were trained with")
    model.load_state_dict(sd, strict=False)
    return save_model_dir(model, out, config_dir)


def input_names(module: Any) -> list[str]:
    """A TorchScript module's forward arguments, in order (self left out)."""
    return [a.name for a in module.forward.schema.arguments[1:]]
