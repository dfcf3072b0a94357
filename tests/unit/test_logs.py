"""Libraries' warnings go to the log file, not the terminal (infertune.logs), in a process the CLI starts:
torch replaces its logger's handlers when it is imported, and a library may ask whether torch exists before it
imports it."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = """
import importlib.util, logging, warnings
import infertune                      # routes: INFERTUNE_QUIET_LIBRARIES=1, as the CLI sets for its children
importlib.util.find_spec("torch")     # transformers asks first
import torch                          # torch installs its stderr handler here
logging.getLogger("torch.utils._pytree").warning("probe-from-torch")
logging.getLogger("transformers.modeling_utils").warning("probe-from-transformers")
logging.getLogger("some.other.library").warning("probe-from-elsewhere")
warnings.warn("probe-python-warning")
print("done")
"""


def test_library_warnings_reach_the_log_file_and_not_stderr(tmp_path):
    log = tmp_path / "libraries.log"
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "INFERTUNE_QUIET_LIBRARIES": "1",
           "INFERTUNE_LOG": str(log)}
    p = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0 and p.stdout.strip() == "done", p.stderr
    assert "probe" not in p.stderr, p.stderr
    text = log.read_text()
    for probe in ("probe-from-torch", "probe-from-transformers", "probe-from-elsewhere", "probe-python-warning"):
        assert probe in text, text


def test_without_the_switch_importing_infertune_changes_no_logging(tmp_path):
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "INFERTUNE_LOG": str(tmp_path / "x.log")}
    code = "import logging, infertune; logging.getLogger('torch').warning('probe-visible')"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "probe-visible" in p.stderr and not (tmp_path / "x.log").exists()
