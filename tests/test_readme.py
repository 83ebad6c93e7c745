"""The README is what a newcomer runs: its commands and links must work.

Its Python examples are run one by one, each as its own file, by
``tests/test_doc_blocks.py``.
"""

import re

from tests.support.paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def bash_blocks():
    return re.findall(r"```bash\n(.*?)```", README, re.S)


def test_readme_gives_exactly_two_commands():
    commands = [line for block in bash_blocks() for line in block.splitlines() if line]
    assert commands == ["pip install -r requirements-dev.txt && alf-env-bench --quick",
                        "pip install -r requirements-dev.txt && python -m pytest"]


def test_readme_links_resolve():
    targets = re.findall(r"\]\(([^)#]+)\)", README)
    for name in ("docs/", "examples/", "docs/benchmarks.md", "docs/reliability.md",
                 "docs/architecture.rst", "docs/contract.rst", "docs/training.rst",
                 "examples/alf_rollout.py", "examples/gym_training_loop.py",
                 "examples/ppo_training.py"):
        assert name in targets, f"the README does not link {name}"
    missing = [t for t in targets if not (REPO_ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_ci_runs_the_readme_test_command():
    test_command = [line for line in bash_blocks()[1].splitlines() if line][0]
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()
    assert "set -euo pipefail" in ci


def test_nothing_points_outside_the_repository():
    """The contract and docs live in the repository: no reference to the old contract
    file outside it (spelt in two pieces, so that this test does not match itself)."""
    outside = ["../" + "shared", "shared" + "/API"]
    offenders = []
    for path in [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.*"),
                 *(REPO_ROOT / "alf_env").rglob("*.py"), *(REPO_ROOT / "examples").glob("*.py")]:
        text = path.read_text(errors="replace")
        if any(reference in text for reference in outside):
            offenders.append(str(path.relative_to(REPO_ROOT)))
    assert not offenders, f"references outside the repository in {offenders}"


def test_readme_says_how_to_get_a_cpu_only_torch():
    assert "install PyTorch's CPU wheel of 2.13.0 first" in README
    assert f"pip install torch==2.13.0 --index-url {TORCH_CPU_INDEX}" in README
    assert "(the CPU build)" not in README


#: The one address the pages give: a command a user runs needs it.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def test_readme_and_docs_point_nowhere_outside_the_repository():
    pages = [REPO_ROOT / "README.md"] + sorted((REPO_ROOT / "docs").glob("*.*"))
    for page in pages:
        if page.suffix in (".md", ".rst", ".py"):
            text = page.read_text().replace(TORCH_CPU_INDEX, "")
            assert not re.search(r"https?://", text), page.name


def test_the_first_examples_are_fast_vector_env_then_sb3_then_alf():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    firsts = [next(name for name in ("FastVectorEnv", "FastSubprocVecEnv",
                                     "FastParallelEnvironment") if name in block)
              for block in blocks[:3]]
    assert firsts == ["FastVectorEnv", "FastSubprocVecEnv", "FastParallelEnvironment"]


# The README's headline figures are checked, with every figure of the pages, by
# tests/test_doc_figures.py.
