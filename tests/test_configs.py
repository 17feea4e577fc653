"""Every shipped config validates (all checks, nothing started), with the credential variables
it names set to dummy values."""

from pathlib import Path

import pytest

from rsi.config import load_config
from rsi.driver.runner import prepare

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_validates(path, monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, "dummy-value-for-validation")
    prepared = prepare(load_config(path))
    assert prepared.seed.files, path
    assert prepared.config.run.name


def test_the_readme_main_job_is_shipped():
    assert "configs/quickstart.yaml" in (CONFIGS[0].parents[1] / "README.md").read_text()
    assert any(p.name == "quickstart.yaml" for p in CONFIGS)
