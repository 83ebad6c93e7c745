"""Every speed setting of the shared-memory front ends has a paired benchmark row in the docs,
and none is tuned while they step."""

import re
from typing import Dict

import pytest

from tests.support.paths import REPO_ROOT

ANALYSIS = REPO_ROOT / "docs" / "performance_analysis.md"
SECTION = "## Settings and the rows behind them"
FUTEX_H = REPO_ROOT / "csrc" / "futex.h"
#: The front ends' constructor options whose defaults are speed settings.
DEFAULT_OPTIONS = ("worker_cpus", "spin_us", "num_workers")


def settings_table() -> Dict[str, str]:
    """The settings section's table: first cell (without backticks) -> the whole row."""
    text = ANALYSIS.read_text()
    assert SECTION in text, f"docs/performance_analysis.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or set(cells[0]) <= {"-", ":"}:
            continue
        if cells[0]:  # an empty first cell continues the setting above
            rows[cells[0].strip("`")] = line
    rows.pop("setting", None)  # the header
    return rows


def native_spin_caps() -> list:
    """The adaptive spin caps of csrc/futex.h (each a setting with a default)."""
    return re.findall(r"inline constexpr std::chrono::nanoseconds (kAdaptiveMax\w+) =",
                      FUTEX_H.read_text())


def test_the_native_spin_caps_are_found():
    assert set(native_spin_caps()) >= {"kAdaptiveMaxJobWaitSpin", "kAdaptiveMaxSpreadSpin"}


@pytest.mark.parametrize("setting", [*DEFAULT_OPTIONS, *native_spin_caps()])
def test_each_setting_has_a_row_with_a_paired_figure(setting):
    rows = settings_table()
    assert setting in rows, (f"{setting} has no row in docs/performance_analysis.md, {SECTION!r}: "
                             f"a setting stays only with a benchmark row behind it")
    assert re.search(r"\d\.\d\d", rows[setting]), f"the row of {setting} quotes no ratio"


def test_no_setting_is_tuned_while_the_env_steps():
    # Settings are chosen at start (or by the user): a tuner that times windows of
    # slower settings while the user's loop runs costs what the user sees.
    library = REPO_ROOT / "alf_env"
    for path in library.rglob("*.py"):
        text = path.read_text()
        for name in ("StepTuner", "step_hook", ".omp_pause_resource"):
            assert name not in text, f"{path.relative_to(REPO_ROOT)} names {name}"


def test_the_table_rows_name_only_settings_that_exist():
    known = set(DEFAULT_OPTIONS) | set(native_spin_caps()) | {"torch threads"}
    extra = set(settings_table()) - known
    assert not extra, f"rows for settings the code does not have: {sorted(extra)}"
