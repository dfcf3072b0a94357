"""Native code's writes to file descriptor 2 (kineto's "USDT: ... profiler_start" lines while the kernel mix is
profiled) go to the library log while the libraries' logs are routed there, and to the terminal otherwise."""

import logging
import os

from infertune import logs


def test_native_writes_go_to_the_routed_log_and_stderr_comes_back(tmp_path, monkeypatch, capfd):
    log = tmp_path / "libraries.log"
    monkeypatch.setenv(logs.ENV_ON, "1")
    monkeypatch.setattr(logs, "_ROUTED", (log, logging.NullHandler()))
    with logs.native_stderr_to_log():
        os.write(2, b"USDT: profiler_start\n")
    os.write(2, b"after\n")
    assert "USDT: profiler_start" in log.read_text()
    err = capfd.readouterr().err
    assert "after" in err and "USDT" not in err


def test_without_routing_nothing_changes(tmp_path, monkeypatch, capfd):
    monkeypatch.delenv(logs.ENV_ON, raising=False)
    with logs.native_stderr_to_log():
        os.write(2, b"shown\n")
    assert "shown" in capfd.readouterr().err
