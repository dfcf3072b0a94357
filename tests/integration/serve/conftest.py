import pytest
from serve_helpers import FAULT_MARKER, bench


@pytest.fixture(scope="session")
def minilm_server():
    """One real `infertune serve minilm` for the session (the load dominates: share it)."""
    srv = bench.ours("minilm", "--max-items-per-request", "64", "--max-body-mb", "1", "--max-queue", "1024",
                     "--drain-s", "0", env={"INFERTUNE_SERVE_FAULT_MARKER": FAULT_MARKER})
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def fake_server(tmp_path):
    """Factory: a real `infertune serve` of a fake-backend artifact (deterministic forward cost).

    `drain_s`: --drain-s of the server. 0 by default: it is stopped at teardown with nothing routing to it,
    and the 2 s default drain cost every test 2 s there; None keeps the server's default (the SIGTERM tests)."""
    from serve_helpers import write_fake_artifact

    started = []

    def start(*flags: str, us_per_token: int = 100, headers: dict[str, str] | None = None,
              drain_s: float | None = 0.0):
        art = write_fake_artifact(tmp_path / f"art{len(started)}", us_per_token)
        if drain_s is not None:
            flags = (*flags, "--drain-s", f"{drain_s:g}")
        srv = bench.ours(str(art), *flags, capture=True, headers=headers)
        started.append(srv)
        return srv.wait_ready(60)

    yield start
    for srv in started:
        srv.stop()
