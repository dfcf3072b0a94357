"""Run as `python -m infertune.doctor.torch_probe`: print what torch and onnxruntime see, as JSON.

Runs in a subprocess so a broken CUDA setup (hang, crash, fork poisoning) cannot take the doctor down,
and so the doctor's own process never initialises CUDA."""

from __future__ import annotations

import json
import sys
import warnings


def probe() -> dict:
    out: dict = {"installed": False}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import torch
        except Exception as e:  # ImportError, or a broken install (missing libcudart, ...)
            out["import_error"] = f"{type(e).__name__}: {e}"
            return out
        out.update(installed=True, version=torch.__version__, cuda=torch.version.cuda,
                   hip=getattr(torch.version, "hip", None), debug=bool(torch.version.debug))
        try:
            out["arch_list"] = torch.cuda.get_arch_list()
        except Exception as e:
            out["arch_list"] = []
            out["arch_list_error"] = str(e)
        try:
            out["cuda_available"] = bool(torch.cuda.is_available())
            out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
        except Exception as e:
            out["cuda_available"], out["device_count"] = False, 0
            out["cuda_error"] = f"{type(e).__name__}: {e}"
        devices = []
        for i in range(out.get("device_count", 0)):
            try:
                p = torch.cuda.get_device_properties(i)
                devices.append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                                "total_memory_bytes": int(p.total_memory),
                                "multi_processor_count": int(p.multi_processor_count)})
            except Exception as e:
                devices.append({"index": i, "error": f"{type(e).__name__}: {e}"})
        out["devices"] = devices
        try:
            out["cudnn"] = torch.backends.cudnn.version() if out.get("cuda_available") else None
        except Exception:
            out["cudnn"] = None
    out["warnings"] = [str(w.message)[:400] for w in caught]
    return out


def probe_onnxruntime() -> dict:
    try:
        import onnxruntime as ort
    except Exception as e:
        return {"installed": False, "import_error": f"{type(e).__name__}: {e}"}
    try:
        providers = list(ort.get_available_providers())
    except Exception:
        providers = []
    return {"installed": True, "version": ort.__version__, "providers": providers}


if __name__ == "__main__":
    json.dump({"torch": probe(), "onnxruntime": probe_onnxruntime()}, sys.stdout)
