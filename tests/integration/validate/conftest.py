import pytest
from validate_helpers import write_fake_artifact


@pytest.fixture
def fake_artifact(tmp_path):
    """Factory: a fake-backend artifact under tmp_path (see validate_helpers.write_fake_artifact)."""
    return lambda name="fake", **kw: write_fake_artifact(tmp_path / name, **kw)
