"""benchmarks/training_loop.py: the full run behind training_loop.json, and the docs'
tables generated from it."""

import json
import sys
import textwrap

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def loop():
    return load_benchmark_script("training_loop")


def _results(loop, fast, sync, others=("gym_async", "sb3_subproc", "envpool", "pufferlib_1w")):
    """Results with every table run: fast_vector ``fast``, fast_parallel equal to it,
    gym_sync ``sync``, and ``others`` at 1.0 each launch."""
    launches = {"fast_vector": fast, "fast_parallel": list(fast), "gym_sync": sync,
                **{o: [1.0] * len(fast) for o in others}}
    table = {run: {"launches": launches} for run in loop.TABLE_RUNS}
    heads = {run: {"launches": {b: launches[b] for b in loop.HEADLINE_BACKENDS}}
             for run in loop.HEADLINES}
    return {**table, **heads}


def _page(name):
    return f"before\n<!-- training_loop: {name} -->\nold\n<!-- /training_loop: {name} -->\nafter\n"


def test_the_ratio_table_holds_each_pairs_paired_median(loop):
    # fast / sync launch by launch: 1, 2, 3 (median 2); over the others' 1.0: 2, 4, 6.
    results = _results(loop, [2.0, 4.0, 6.0], [2.0, 2.0, 2.0], others=("gym_async",))
    lines = loop.render_page(_page("ratios"), results,
                             {"ratios": loop.BLOCKS["ratios"]}).splitlines()
    header = lines[2]
    assert header.startswith("| ratio | CartPole, quiet | CartPole, policy |")
    assert header.endswith("| Pong, busy |")
    row = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| `")}
    assert row["`FastVectorEnv` / `SyncVectorEnv`"].count("| 2.00x") == 9
    assert row["`FastVectorEnv` / `AsyncVectorEnv`"].count("| 4.00x") == 9
    assert row["`FastParallelEnvironment` / `FastVectorEnv`"].count("| 1.00x") == 9
    # A backend the runs did not measure: "not measured", never a number.
    assert row["`FastVectorEnv` / EnvPool"].count("| not measured") == 9
    assert lines[0] == "before" and lines[-1] == "after"


def test_the_rates_and_headline_tables_quote_medians_and_spreads(loop):
    results = _results(loop, [24_800.0, 27_700.0, 28_700.0], [24_100.0, 20_000.0, 30_000.0],
                       others=("gym_async",))
    text = loop.render_page(_page("rates") + _page("headline runs"), results,
                            {name: loop.BLOCKS[name] for name in ("rates", "headline runs")})
    assert ("| CartPole-v1, quiet | 27.7k | 27.7k | 24.1k | 1 | not measured | not measured | "
            "not measured |") in text
    # Paired: 24.8/24.1, 27.7/20.0, 28.7/30.0 -> median 1.03, range 0.96-1.39.
    assert ("| HalfCheetah-v5, policy | 3 | 27.7k (24.8k–28.7k) | 27.7k (24.8k–28.7k) | "
            "24.1k | 1.03x (0.96–1.39x) |") in text


def test_the_readme_headline_is_fast_vector_over_sync_in_the_three_runs(loop):
    results = _results(loop, [2.0, 3.0, 4.0], [2.0, 2.0, 2.0])
    text = loop.render_page(_page("headline"), results, page="README.md")
    assert text.count("**1.50x**") == 3


def test_an_rst_block_is_rendered_at_its_markers_indentation(loop):
    results = _results(loop, [2.0, 3.0, 4.0], [2.0, 2.0, 2.0])
    cell = ("     - Before.\n\n       .. training_loop: policy loop\n\n       old\n\n"
            "       .. /training_loop: policy loop\n\n       After.\n")
    text = loop.render_page(cell, results, page="docs/training.rst")
    lines = text.splitlines()
    assert lines[2:5] == ["       .. training_loop: policy loop", "",
                          "       In a training loop of 8 envs with a policy, "
                          "``FastVectorEnv`` ran 1.50x"]
    assert lines[-3:] == ["       .. /training_loop: policy loop", "", "       After."]
    assert "old" not in text


def test_every_page_with_a_block_is_one_the_figures_test_reads(loop):
    from tests.test_doc_figures import PAGES
    assert {page for page, _ in loop.BLOCKS.values()} <= set(PAGES)


@pytest.mark.parametrize("value, quoted", [
    (214_321.0, "214k"), (49_249.0, "49.2k"), (5_612.0, "5.61k"), (1_817.0, "1.82k"),
    (630.4, "630")])
def test_rates_are_quoted_to_three_digits(loop, value, quoted):
    assert loop.rate(value) == quoted


@pytest.mark.parametrize("text", ["no markers\n", _page("ratios") * 2])
def test_a_page_without_exactly_one_block_is_an_error_naming_it(loop, text):
    with pytest.raises(ValueError, match=r"docs/benchmarks.md: expected one block "
                                         r"'<!-- training_loop: ratios -->'"):
        loop.render_page(text, _results(loop, [1.0], [1.0]),
                         {"ratios": ("docs/benchmarks.md", loop.ratio_table)})


def test_stale_pages_names_a_page_whose_block_is_out_of_date(loop):
    results = json.loads((REPO_ROOT / "docs" / "results" / "training_loop.json").read_text())
    current = {page: (REPO_ROOT / page).read_text() for page, _ in loop.BLOCKS.values()}
    assert loop.stale_pages(results, write=False, read=current.__getitem__) == []
    edited = dict(current)
    edited["README.md"] = current["README.md"].replace("**", "*", 1)
    assert loop.stale_pages(results, write=False, read=edited.__getitem__) == ["README.md"]


def test_run_all_runs_each_missing_run_and_keeps_those_done(loop, tmp_path):
    script = tmp_path / "fake_spread.py"
    script.write_text(textwrap.dedent("""
        import json, sys
        out = sys.argv[sys.argv.index("--json") + 1]
        json.dump({"args": sys.argv[1:sys.argv.index("--json")]}, open(out, "w"))
    """))
    runs = {"A, quiet": ["--workload", "A"], "B": ["--workload", "B"]}
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "B.json").write_text('{"kept": true}')
    loop.run_all(tmp_path / "out", runs, script)
    commit = (tmp_path / "out" / "commit").read_text().strip()
    assert commit == loop.commit_measured() and len(commit.removesuffix("-dirty")) == 40
    assert json.loads((tmp_path / "out" / "A_quiet.json").read_text()) == {
        "args": ["--workload", "A"]}
    assert json.loads((tmp_path / "out" / "B.json").read_text()) == {"kept": True}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "A_quiet.json", "B.json", "commit"]
    # Runs of other code are not resumed into the same directory.
    (tmp_path / "out" / "commit").write_text("0" * 40 + "\n")
    with pytest.raises(RuntimeError, match="holds runs of 0000"):
        loop.run_all(tmp_path / "out", runs, script)


def test_assemble_records_the_machine_versions_and_commit_with_each_run(loop, tmp_path):
    (tmp_path / "A_quiet.json").write_text('{"launches": {"fast_vector": [1.0]}}')
    with pytest.raises(FileNotFoundError, match="was not made by run"):
        loop.assemble(tmp_path, ["A, quiet"])
    (tmp_path / "commit").write_text("f" * 40 + "\n")
    out = loop.assemble(tmp_path, ["A, quiet"])
    assert list(out) == ["machine", "versions", "commit", "loop", "A, quiet"]
    assert out["A, quiet"] == {"launches": {"fast_vector": [1.0]}}
    assert out["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert out["versions"]["numpy"] == __import__("numpy").__version__
    assert out["commit"] == "f" * 40
    with pytest.raises(FileNotFoundError, match="run 'B'"):
        loop.assemble(tmp_path, ["A, quiet", "B"])


def test_every_run_of_the_results_file_is_one_the_script_runs(loop):
    results = json.loads((REPO_ROOT / "docs" / "results" / "training_loop.json").read_text())
    runs = [key for key, value in results.items() if isinstance(value, dict)
            and key != "versions"]
    assert runs == list(loop.RUNS)
    for run in loop.TABLE_RUNS:  # and each is the condition its column names
        workload, condition = run.split(", ")
        policy, load = loop.CONDITIONS[condition]
        assert (results[run]["workload"], results[run]["num_envs"], results[run]["policy"],
                results[run]["load"]) == (workload, 8, policy, load), run
