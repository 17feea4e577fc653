"""A results page keeps its hand-written reading when a perf script regenerates its figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("perf_results_page", REPO / "perf" / "results_page.py")
results_page = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(results_page)


def test_regenerating_keeps_the_hand_written_reading_and_replaces_the_figures(tmp_path):
    page = tmp_path / "page.md"
    results_page.write_page(page, ["# figures", "", "| a | 1.00 |"])
    page.write_text(page.read_text() + "\n" + results_page.HAND_WRITTEN + "\n\n## Reading\n\nThe gain is real.\n")

    results_page.write_page(page, ["# figures", "", "| a | 2.00 |"])

    text = page.read_text()
    assert "| a | 2.00 |" in text and "| a | 1.00 |" not in text
    assert text.endswith(results_page.HAND_WRITTEN + "\n\n## Reading\n\nThe gain is real.\n")
    assert text.count(results_page.HAND_WRITTEN) == 1


def test_a_page_without_the_marker_is_replaced_whole(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# old figures\n\nold prose with no marker\n")
    results_page.write_page(page, ["# new figures"])
    assert page.read_text() == "# new figures\n"


def test_a_missing_page_is_created(tmp_path):
    page = tmp_path / "new.md"
    results_page.write_page(page, ["# figures", ""])
    assert page.read_text() == "# figures\n"


def test_generated_figures_may_not_carry_the_marker(tmp_path):
    with pytest.raises(ValueError, match="hand-written marker"):
        results_page.write_page(tmp_path / "page.md", ["# figures", results_page.HAND_WRITTEN])


@pytest.mark.parametrize("name", ["meta-stage0.md", "meta-throughput.md"])
def test_the_shipped_pages_that_carry_a_reading_mark_it(name):
    assert (REPO / "perf" / "results" / name).read_text().count(results_page.HAND_WRITTEN) == 1
