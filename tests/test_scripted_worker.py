from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rsi.errors import ConfigError, WorkerError
from rsi.workers import worker_class
from rsi.workers.scripted import ScriptedWorker


def make(tmp_path: Path, script) -> ScriptedWorker:
    path = tmp_path / "script.yaml"
    path.write_text(script if isinstance(script, str) else yaml.safe_dump(script))
    config = ScriptedWorker.Config(type="scripted", script="script.yaml")
    return ScriptedWorker(config, base_dir=tmp_path, seed=0)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "keep.py").write_text("x = 1\n")
    (root / "gone.txt").write_text("bye\n")
    return root


SCRIPT = {
    "edits": [
        {"files": {"keep.py": "x = 2\n", "pkg/sub/new.py": "y = 3\n", "gone.txt": None}, "reply": "first"},
        {"files": {"keep.py": "x = 4\n"}, "reply": "second"},
    ],
    "ask_reply": "learned",
}


def test_registry_resolves_scripted_and_marks_it_offline():
    cls = worker_class("scripted")
    assert cls is ScriptedWorker
    assert cls.kind == "agent" and cls.offline is True


def test_replay_writes_deletes_nested_and_replies(tmp_path, checkout):
    worker = make(tmp_path, SCRIPT)
    assert worker.edit(checkout, "improve") == "first"
    assert (checkout / "keep.py").read_text() == "x = 2\n"
    assert (checkout / "pkg/sub/new.py").read_text() == "y = 3\n"
    assert not (checkout / "gone.txt").exists()
    assert worker.edit(checkout, "improve") == "second"
    assert (checkout / "keep.py").read_text() == "x = 4\n"
    assert worker.ask("what did you learn?") == "learned"


def test_exhausted_script_makes_an_empty_edit(tmp_path, checkout):
    worker = make(tmp_path, {"edits": [{"files": {"keep.py": "x = 9\n"}}]})
    worker.edit(checkout, "p")
    before = {p.name: p.read_bytes() for p in checkout.rglob("*") if p.is_file()}
    assert worker.edit(checkout, "p") == ""
    after = {p.name: p.read_bytes() for p in checkout.rglob("*") if p.is_file()}
    assert after == before
    assert worker.ask("p") == ""  # ask_reply defaults to empty


def test_state_resumes_the_script_position(tmp_path, checkout):
    first = make(tmp_path, SCRIPT)
    first.edit(checkout, "p")
    resumed = make(tmp_path, SCRIPT)
    resumed.set_state(first.get_state())
    assert resumed.edit(checkout, "p") == "second"
    assert resumed.get_state() == {"position": 2}


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "does not exist"),
        ("edits: [unclosed\n", "YAML error"),
        ("edits: {files: 3}\n", "expected"),
        ("edits:\n  - {files: {a.py: 1}}\n", "expected"),
        ("edits: []\nsurprise: 1\n", "expected"),
    ],
)
def test_bad_script_is_a_config_error_naming_the_file(tmp_path, text, message):
    if text is not None:
        (tmp_path / "script.yaml").write_text(text)
    config = ScriptedWorker.Config(type="scripted", script="script.yaml")
    with pytest.raises(ConfigError, match=message) as info:
        ScriptedWorker(config, base_dir=tmp_path, seed=0)
    assert "script.yaml" in str(info.value)


@pytest.mark.parametrize("bad", ["../outside.py", "/tmp/abs.py", "a/../../b.py"])
def test_paths_leaving_the_checkout_are_refused(tmp_path, checkout, bad):
    worker = make(tmp_path, {"edits": [{"files": {"keep.py": "changed\n", bad: "x"}}]})
    with pytest.raises(WorkerError, match="inside the checkout"):
        worker.edit(checkout, "p")
    assert (checkout / "keep.py").read_text() == "x = 1\n"
    assert worker.get_state() == {"position": 0}


def test_symlinked_directory_cannot_smuggle_a_write_out(tmp_path, checkout):
    outside = tmp_path / "outside"
    outside.mkdir()
    (checkout / "link").symlink_to(outside)
    worker = make(tmp_path, {"edits": [{"files": {"link/evil.py": "x"}}]})
    with pytest.raises(WorkerError, match="outside the checkout"):
        worker.edit(checkout, "p")
    assert not (outside / "evil.py").exists()


def test_config_rejects_unknown_keys():
    with pytest.raises(ValidationError, match="extra"):
        ScriptedWorker.Config(type="scripted", script="s.yaml", temperature=0.2)
