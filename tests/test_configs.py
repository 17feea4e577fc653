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


def test_the_or_config_trains_on_every_size_of_the_or_library():
    """Its train instances mix the sizes of OR1-OR4, as the per-size reports of its runs expect."""
    from benchmarks.binpack.instances import or_library_sizes

    config = load_config(CONFIGS[0].parent / "binpack_or.yaml")
    assert tuple(config.bench_params.train_items) == or_library_sizes() == (120, 250, 500, 1000)
