"""``rsi params ALGORITHM`` prints every parameter straight from the algorithm's model."""

import pytest

from rsi.driver.cli import main
from rsi.registry import algorithm_class


@pytest.mark.parametrize("name", ["darwinx", "adas", "ahe", "meta", "evaluate", "hillclimb"])
def test_every_field_with_its_default_and_description(name, capsys):
    assert main(["params", name]) == 0
    out = capsys.readouterr().out
    fields = {k: f for k, f in algorithm_class(name).Params.model_fields.items() if k != "name"}
    for field_name, field in fields.items():
        if field.default_factory is None and not field.is_required():
            assert f"\n  {field_name}: " in out and f" = {field.default!r}" in out, field_name
        if field.description:
            assert field.description in out


def test_bounds_are_shown_and_an_unknown_algorithm_is_exit_2(capsys):
    assert main(["params", "darwinx"]) == 0
    assert "  max_steps: int = 10  [>= 0]" in capsys.readouterr().out
    assert main(["params", "darwinz"]) == 2
    assert "did you mean 'darwinx'" in capsys.readouterr().err
