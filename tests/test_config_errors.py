"""Bad input gets exit 2, one readable line naming the problem and where, and nothing else:
no run directory, no Ray, no model call."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rsi.driver.cli import main

REPO = Path(__file__).resolve().parents[1]
TABLE = "splits: {train: [t1, t2], dev: [d1], test: [x1]}\nscores:\n  v0: {t1: 1.0, t2: 0.5, d1: 0.5, x1: 0}\n"


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "table.yaml").write_text(TABLE)
    target = tmp_path / "tgt"
    target.mkdir()
    (target / "components.yaml").write_text("- {name: solver, glob: solve.py}\n- {name: version, glob: VERSION}\n")
    (target / "solve.py").write_text("print('{\"answer\": \"v0\"}')\n")
    (target / "VERSION").write_text("v0\n")
    return tmp_path


def config(tmp_path, body: str) -> Path:
    base = textwrap.dedent("""\
        name: t
        storage: {storage}
        target: {{path: tgt, kind: program, entry: solve.py}}
        benchmark: {{name: table, path: table.yaml}}
        algorithm: {{name: evaluate}}
        """).format(storage=tmp_path / "runs")
    p = tmp_path / "cfg.yaml"
    p.write_text(base + body)
    return p


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def expect_error(args, capsys, tmp_path, *needles):
    code, err = run_cli(args, capsys)
    assert code == 2, err
    assert len(err) == 1, err
    for n in needles:
        assert n in err[0], err[0]
    assert not (tmp_path / "runs").exists(), "no run directory may be created on bad input"
    return err[0]


def test_valid_config_validates(setup, capsys):
    cfg = config(setup, "")
    code = main(["validate", str(cfg)])
    assert code == 0, capsys.readouterr().err
    assert "ok" in capsys.readouterr().out


def test_missing_config_file(setup, capsys):
    expect_error(["run", setup / "nope.yaml"], capsys, setup, "nope.yaml", "no such config file")


def test_yaml_syntax_error_has_line_and_column(setup, capsys):
    p = setup / "bad.yaml"
    p.write_text("name: t\ntarget: {path: tgt\nbenchmark: [\n")
    line = expect_error(["run", p], capsys, setup, "bad.yaml:")
    assert "YAML syntax error" in line and line.split("bad.yaml:")[1][0].isdigit()


def test_unknown_key_names_close_match(setup, capsys):
    cfg = config(setup, "sed: 3\n")
    expect_error(["run", cfg], capsys, setup, "unknown key 'sed'", "did you mean 'seed'")


def test_unknown_algorithm_param(setup, capsys):
    cfg = config(setup, "").read_text().replace("{name: evaluate}", "{name: evaluate, trails: 2}")
    (setup / "cfg.yaml").write_text(cfg)
    expect_error(["run", setup / "cfg.yaml"], capsys, setup, "algorithm.trails", "did you mean 'trials'")


def test_wrong_type(setup, capsys):
    expect_error(["run", config(setup, "seed: many\n")], capsys, setup, "seed", "integer")


def test_out_of_range_parameter(setup, capsys):
    cfg = config(setup, "")
    expect_error(["run", cfg, "--algorithm.trials", "0"], capsys, setup, "algorithm.trials", "greater than or equal to 1")


def test_missing_target_directory(setup, capsys):
    cfg = config(setup, "")
    expect_error(["run", cfg, "--target.path", "nowhere"], capsys, setup, "nowhere", "does not exist")


def test_missing_entry_script(setup, capsys):
    cfg = config(setup, "")
    expect_error(["run", cfg, "--target.entry", "main.py"], capsys, setup, "main.py", "not in the target")


def test_missing_components_yaml(setup, capsys):
    (setup / "tgt" / "components.yaml").unlink()
    expect_error(["run", config(setup, "")], capsys, setup, "components.yaml")


def test_overlapping_components_rules(setup, capsys):
    (setup / "tgt" / "components.yaml").write_text(
        "- {name: solver, glob: '*.py'}\n- {name: also, glob: 'solve*'}\n- {name: version, glob: VERSION}\n")
    expect_error(["run", config(setup, "")], capsys, setup, "solve.py", "several component rules")


def test_duplicate_task_ids(setup, capsys):
    (setup / "table.yaml").write_text(TABLE.replace("[t1, t2]", "[t1, t1]"))
    expect_error(["run", config(setup, "")], capsys, setup, "t1", "more than once")


def test_empty_split_the_algorithm_needs(setup, capsys):
    from rsi.algorithm import Algorithm

    class NeedsDev(Algorithm):
        requires_splits = ("dev",)

    from benchmarks.table import TableBenchmark, TableParams

    (setup / "table.yaml").write_text(TABLE.replace("dev: [d1]", "dev: []").replace("d1: 0.5, ", ""))
    bench = TableBenchmark(TableParams(name="table", path=str(setup / "table.yaml")))
    from rsi.errors import ConfigError

    with pytest.raises(ConfigError, match="split 'dev' is empty"):
        NeedsDev.check_benchmark(bench)


def test_literal_api_key_in_config(setup, capsys):
    cfg = config(setup, "")
    expect_error(["run", cfg, "--target.model", "{api_key: sk-abcdefghijklmnop1234}"], capsys, setup,
                 "target.model.api_key", "environment variable")
    expect_error(["run", cfg, "--target.env_pass", "[sk-abcdefghijklmnopqrstu]"], capsys, setup, "literally")


def test_unset_key_variable(setup, capsys, monkeypatch):
    monkeypatch.delenv("RSI_TEST_UNSET_KEY", raising=False)
    cfg = config(setup, "")
    expect_error(["run", cfg, "--target.model", "{provider: openai, model: m, api_key_env: RSI_TEST_UNSET_KEY}"],
                 capsys, setup, "RSI_TEST_UNSET_KEY", "not set")


def test_unknown_algorithm_and_benchmark(setup, capsys):
    cfg = config(setup, "")
    expect_error(["run", cfg, "--algorithm.name", "darwinz"], capsys, setup, "unknown algorithm 'darwinz'", "valid:")
    expect_error(["run", cfg, "--benchmark.name", "tabel"], capsys, setup, "did you mean 'table'")


def test_bad_input_starts_no_ray(setup):
    """In a fresh interpreter: several bad configs, then Ray must not even be imported."""
    cfg = config(setup, "seed: many\n")
    code = textwrap.dedent(f"""
        import sys, json
        from rsi.driver.cli import main
        codes = [main(["run", {str(cfg)!r}]), main(["run", {str(setup / 'nope.yaml')!r}]),
                 main(["validate", {str(cfg)!r}])]
        print(json.dumps({{"codes": codes, "ray": "ray" in sys.modules}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"codes": [2, 2, 2], "ray": False}


# ---- hostile or absurd config values: still one line, exit 2, no run directory ------------------
def test_config_file_that_is_not_utf8(setup, capsys):
    p = setup / "latin1.yaml"
    p.write_bytes(config(setup, "").read_bytes() + "# caf\xe9\n".encode("latin-1"))
    line = expect_error(["run", p], capsys, setup, "latin1.yaml", "not UTF-8")
    assert line == f"rsi: error: {p}: not UTF-8 text (byte 0xe9 at offset {p.stat().st_size - 2})"


@pytest.mark.parametrize("value, needle", [
    (".inf", "must be a finite number (got inf)"),
    (".nan", "must be a finite number (got nan)"),
    ("1e308", "less than or equal to 86400"),
    ("86401", "less than or equal to 86400"),
])
def test_timeout_must_be_finite_and_bounded(setup, capsys, value, needle):
    cfg = config(setup, "")
    expect_error(["run", cfg, "--target.limits.timeout_s", value], capsys, setup, "target.limits.timeout_s", needle)


def test_non_finite_number_anywhere_in_the_config(setup, capsys):
    """Everywhere: run-level sections, custom resources, and a parameter model of the algorithm's
    own that allows inf (a string such as "1e999" only turns into inf during validation)."""
    cfg = config(setup, "budget: {max_cost_usd: .inf}\n")
    expect_error(["run", cfg], capsys, setup, "budget.max_cost_usd", "must be a finite number (got inf)")
    cfg = config(setup, "")
    expect_error(["run", cfg, "--evaluator.resources", "{pool: -.inf}"], capsys, setup, "evaluator.resources.pool",
                 "must be a finite number (got -inf)")
    expect_error(["run", cfg, "--evaluator.num_cpus", "1e999"], capsys, setup, "evaluator.num_cpus", "finite number")
    expect_error(["run", cfg, "--algorithm.name", "darwinx", "--algorithm.screen_regression_tolerance", "1e999"],
                 capsys, setup, "algorithm.screen_regression_tolerance", "must be a finite number (got inf)")


@pytest.mark.parametrize("key, value, bound", [
    ("memory_mb", "1.0e+15", "1048576"),  # YAML reads a bare 1e15 as a string (an error of its own)
    ("memory_mb", "1000000000000000", "1048576"),
    ("max_procs", "1000000000000", "4096"),
    ("file_size_mb", "100000000", "65536"),
    ("stdout_max_bytes", "100000000000", "67108864"),
    ("cpu_s", "100000000", "604800"),
])
def test_sandbox_limits_have_upper_bounds(setup, capsys, key, value, bound):
    cfg = config(setup, "")
    expect_error(["run", cfg, f"--target.limits.{key}", value], capsys, setup, f"target.limits.{key}", bound)


def test_sandbox_limit_bounds_are_documented():
    from rsi.config import LimitsConfig

    for name in ("timeout_s", "cpu_s", "memory_mb", "max_procs", "file_size_mb", "stdout_max_bytes"):
        assert "at most" in LimitsConfig.model_fields[name].description, name


def test_rollout_cpus_bounded(setup, capsys):
    cfg = config(setup, "")
    expect_error(["run", cfg, "--evaluator.num_cpus", "1e9"], capsys, setup, "evaluator.num_cpus",
                 "less than or equal to 1024")


def test_rollout_cpus_beyond_the_local_ray(setup, capsys):
    cfg = config(setup, "ray: {num_cpus: 2}\n")
    line = expect_error(["run", cfg, "--evaluator.num_cpus", "3"], capsys, setup, "evaluator.num_cpus")
    assert "asks for 3 CPUs but the local Ray has 2" in line


def test_yaml_alias_bomb_is_refused_quickly(setup, capsys):
    import time

    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    p = setup / "bomb.yaml"
    p.write_text(config(setup, "").read_text() + "\n".join(lines) + "\n")
    t0 = time.monotonic()
    expect_error(["run", p], capsys, setup, "bomb.yaml", "aliases expand to more than 100000 nodes")
    assert time.monotonic() - t0 < 5


def test_yaml_recursive_alias_is_refused(setup, capsys):
    p = setup / "loop.yaml"
    p.write_text(config(setup, "").read_text() + "extra: &x [1, *x]\n")
    expect_error(["run", p], capsys, setup, "loop.yaml", "recursive")


def test_yaml_aliases_in_moderation_still_work(setup, capsys):
    p = setup / "anchors.yaml"
    p.write_text("seed: &s 2\n" + config(setup, "").read_text() + "ray: {num_cpus: *s}\n")
    assert main(["validate", str(p)]) == 0, capsys.readouterr().err


def test_yaml_unprintable_character_is_one_line(setup, capsys):
    p = setup / "ctl.yaml"
    p.write_bytes(config(setup, "").read_bytes() + b"x: \x07\n")
    expect_error(["run", p], capsys, setup, "ctl.yaml", "YAML")


def test_run_dir_that_is_an_existing_file(setup, capsys):
    cfg = config(setup, "")
    existing = setup / "notes.txt"
    existing.write_text("mine\n")
    line = expect_error(["run", cfg, "--run-dir", existing], capsys, setup, str(existing), "existing file")
    assert existing.read_text() == "mine\n", line


def test_run_dir_that_is_a_non_empty_directory_but_no_run(setup, capsys):
    cfg = config(setup, "")
    mine = setup / "myexp"
    mine.mkdir()
    (mine / "config.yaml").write_text("my: own\n")
    expect_error(["run", cfg, "--run-dir", mine], capsys, setup, str(mine), "not empty")
    assert sorted(p.name for p in mine.iterdir()) == ["config.yaml"]
    assert (mine / "config.yaml").read_text() == "my: own\n"


def test_run_dir_that_holds_a_run(setup, capsys):
    cfg = config(setup, "")
    done = setup / "done"
    done.mkdir()
    (done / "run.json").write_text("{}")
    expect_error(["run", cfg, "--run-dir", done], capsys, setup, str(done), "already holds a run", "rsi resume")
