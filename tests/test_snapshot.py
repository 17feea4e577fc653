import os

import pytest

from rsi.components import Components, glob_to_regex
from rsi.errors import ConfigError, Rejected
from rsi.snapshot import Snapshot, discard_runtime_files

RULES = "- {name: code, glob: 'src/**/*.py'}\n- {name: prompts, glob: 'prompts/*.md'}\n- {name: config, glob: agent.yaml}\n"


def base_tree(make_tree):
    return make_tree({"components.yaml": RULES, "src/main.py": "print(1)\n", "prompts/sys.md": "hi\n",
                      "agent.yaml": "steps: 3\n"})


def test_glob_semantics():
    assert glob_to_regex("src/**/*.py").match("src/a.py")
    assert glob_to_regex("src/**/*.py").match("src/x/y/a.py")
    assert not glob_to_regex("prompts/*.md").match("prompts/x/a.md")
    assert glob_to_regex("runtime/**").match("runtime/a/b.txt")


def test_snapshot_id_is_content_addressed(make_tree, tmp_path):
    root = base_tree(make_tree)
    a = Snapshot.from_dir(root)
    b = Snapshot.from_dir(root)
    assert a.snapshot_id == b.snapshot_id and a.parent_id is None
    assert a.files["src/main.py"].component == "code"
    assert a.files["components.yaml"].component == "_components"


def test_commit_child_and_changed_paths(make_tree):
    seed = Snapshot.from_dir(base_tree(make_tree))
    with seed.check_out() as co:
        (co / "src/main.py").write_text("print(2)\n")
        (co / "src/util").mkdir()
        (co / "src/util/new.py").write_text("X = 1\n")
        child = seed.commit(co)
    assert child.parent_id == seed.snapshot_id
    assert seed.changed_paths(child) == ["src/main.py", "src/util/new.py"]
    assert not co.exists(), "check_out removes its directory on exit"


def test_executable_bit_is_part_of_identity(make_tree):
    seed = Snapshot.from_dir(base_tree(make_tree))
    with seed.check_out() as co:
        os.chmod(co / "src/main.py", 0o755)
        child = seed.commit(co)
    assert seed.changed_paths(child) == ["src/main.py"]
    assert child.files["src/main.py"].executable


@pytest.mark.parametrize("edit,reason", [
    (lambda co: None, "no_change"),
    (lambda co: (co / "notes.txt").write_text("x"), "unclassified_path"),
    (lambda co: (co / "components.yaml").write_text("- {name: all, glob: '**'}\n"), "out_of_scope"),
    (lambda co: os.symlink("/etc/passwd", co / "src/leak.py"), "symlink_escape"),
    (lambda co: (co / "prompts/sys.md").write_text("key sk-live-0123456789abcdef"), "secret_leak"),
])
def test_commit_rejections(make_tree, edit, reason):
    seed = Snapshot.from_dir(base_tree(make_tree))
    with seed.check_out() as co:
        edit(co)
        with pytest.raises(Rejected) as exc:
            seed.commit(co, secrets=["sk-live-0123456789abcdef"])
    assert exc.value.reason == reason


def test_ambiguous_path_rejected(make_tree):
    rules = "- {name: a, glob: '*.py'}\n- {name: b, glob: 'x*.py'}\n"
    seed = Snapshot.from_dir(make_tree({"components.yaml": rules, "m.py": "1"}))
    with seed.check_out() as co:
        (co / "x1.py").write_text("2")
        with pytest.raises(Rejected) as exc:
            seed.commit(co)
    assert exc.value.reason == "ambiguous_path"


def test_out_of_scope_edit_rejected(make_tree):
    seed = Snapshot.from_dir(base_tree(make_tree))
    with seed.check_out() as co:
        (co / "agent.yaml").write_text("steps: 9\n")
        with pytest.raises(Rejected) as exc:
            seed.commit(co, evolve_scope=["code"])
        assert exc.value.reason == "out_of_scope"
        (co / "agent.yaml").write_text("steps: 3\n")
        (co / "src/main.py").write_text("print(3)\n")
        assert seed.commit(co, evolve_scope=["code"]).files["src/main.py"]


def test_runtime_artifacts_discarded_before_commit(make_tree):
    seed = Snapshot.from_dir(base_tree(make_tree))
    with seed.check_out() as co:
        (co / "src/__pycache__").mkdir()
        (co / "src/__pycache__/main.cpython-311.pyc").write_bytes(b"\0")
        (co / "src/stale.pyc").write_bytes(b"\0")
        with pytest.raises(Rejected) as exc:
            seed.commit(co)
        assert exc.value.reason == "no_change"
        assert not (co / "src/__pycache__").exists()
    tree = base_tree(make_tree)
    (tree / "__pycache__").mkdir()
    (tree / "__pycache__/x.pyc").write_bytes(b"1")
    assert discard_runtime_files(tree) == ["__pycache__"]


def test_seed_problems_are_config_errors(make_tree, tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        Snapshot.from_dir(tmp_path / "nope")
    with pytest.raises(ConfigError, match="missing components.yaml"):
        Snapshot.from_dir(make_tree({"a.py": "1"}, name="nocomp"))
    with pytest.raises(ConfigError, match="matches no component"):
        Snapshot.from_dir(make_tree({"components.yaml": RULES, "stray.txt": "x"}, name="stray"))
    overlap = "- {name: a, glob: '*.py'}\n- {name: b, glob: 'm*.py'}\n"
    with pytest.raises(ConfigError, match="several component rules"):
        Snapshot.from_dir(make_tree({"components.yaml": overlap, "m.py": "1"}, name="overlap"))


def test_manifest_roundtrip(make_tree):
    seed = Snapshot.from_dir(base_tree(make_tree))
    back = Snapshot.from_manifest(seed.manifest(), seed.blobs)
    assert back.snapshot_id == seed.snapshot_id
    assert back.read("src/main.py") == b"print(1)\n"


def test_components_rule_table_and_scope():
    comps = Components.parse([{"name": "a", "glob": "*.py"}, {"name": "b", "glob": "*.md"}])
    assert "| a | `*.py` |" in comps.table()
    assert comps.resolve_scope("*") == {"a", "b"}
    with pytest.raises(ConfigError, match="unknown components"):
        comps.resolve_scope(["zzz"])
