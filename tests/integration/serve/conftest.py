import pytest
from serve_helpers import bench, fault_env


@pytest.fixture(scope="session")
def minilm_server():
    """One real `infertune serve minilm` for the session (the load dominates: share it)."""
    srv = bench.ours("minilm", "--max-items-per-request", "64", "--max-body-mb", "1", "--max-queue", "1024",
                     "--drain-s", "0",
                     env=fault_env())
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def fake_server(tmp_path):
    """Factory: a real `infertune serve` of a fake-backend artifact (deterministic forward cost); faults=True: with
    the test fault plugin (serve_helpers.fault_env)."""
    from serve_helpers import write_fake_artifact

    started = []

    def start(*flags: str, us_per_token: int = 100, headers: dict[str, str] | None = None, faults: bool = False):
        art = write_fake_artifact(tmp_path / f"art{len(started)}", us_per_token)
        if "--drain-s" not in flags:  # stopping takes no drain delay unless the test is about the drain
            flags = (*flags, "--drain-s", "0")
        env = fault_env(forward_fault=False) if faults else None  # the NaN fault only (see fault_env)
        srv = bench.ours(str(art), *flags, capture=True, headers=headers, env=env)
        started.append(srv)
        return srv.wait_ready(60)

    yield start
    for srv in started:
        srv.stop()
