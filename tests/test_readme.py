"""The README is what a newcomer runs: its commands and examples must work."""

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
README = (REPO_ROOT / "README.md").read_text()


def bash_blocks():
    return re.findall(r"```bash\n(.*?)```", README, re.S)


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_gives_exactly_two_commands():
    commands = [line for block in bash_blocks() for line in block.splitlines() if line]
    assert commands == ["pip install -r requirements-dev.txt && alf-env-bench --quick",
                        "pip install -r requirements-dev.txt && python -m pytest"]


def test_readme_links_resolve():
    targets = re.findall(r"\]\(([^)#]+)\)", README)
    for name in ("docs/", "examples/", "docs/benchmarks.md", "docs/reliability.md",
                 "docs/architecture.rst", "examples/alf_rollout.py",
                 "examples/gym_training_loop.py"):
        assert name in targets, f"the README does not link {name}"
    missing = [t for t in targets if not (REPO_ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_ci_runs_the_readme_test_command():
    test_command = [line for line in bash_blocks()[1].splitlines() if line][0]
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()
    assert "set -euo pipefail" in ci


def test_readme_examples_run():
    code = "\n".join(python_blocks())
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "torch.Size([4, 4])" in result.stdout
