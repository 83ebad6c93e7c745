"""Every Python code block of the README and the docs runs on its own, saved as a file.

Each block is written to a file of its own and run by a fresh interpreter (as a
reader would copy it), so a block cannot lean on imports or names of the blocks
before it, and spawn/forkserver code must have its ``__main__`` guard.

A block that is deliberately not a whole program starts with a comment line
``# fragment: <why>``; there must be few of those. Blocks written for ALF
itself (the "before" side of the migration guide) need ALF, which is not
installed here; they are recognised by their ``alf.`` imports, and run as soon
as ALF is importable. The blocks run ``CONCURRENCY`` at a time
(``tests.support.child_runs.RunTable``).
"""

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, NamedTuple

import pytest

from tests.support.child_runs import RunTable, selected_params
from tests.support.paths import REPO_ROOT

CONCURRENCY = 3  # blocks run at the same time
FRAGMENT_MARK = "# fragment:"
MAX_FRAGMENTS = 3
ALF_IMPORT = re.compile(r"^\s*(from|import) alf(\.|\s)", re.M)

# What some blocks print, as their comments say: a source snippet -> expected stdout text.
EXPECTED_OUTPUT: Dict[str, List[str]] = {
    "print(time_step.observation.shape)": ["torch.Size([4, 4])"],
    "print(time_step.observation.shape, time_step.env_id, episodes)": [
        "torch.Size([4, 4]) tensor([0, 1, 2, 3], dtype=torch.int32)"],
    "print(type(env).__name__, env.batch_size)": ["FastParallelEnvironment 4"],
    "print(observations.shape, rewards.dtype)": ["(4, 4) float64"],
    "os.kill(envs.worker_pids()[1], signal.SIGKILL)": [
        "The worker process of env 1 died during step: killed by SIGKILL (signal 9)."],
}


class Block(NamedTuple):
    source: str   # the file it comes from, relative to the repository
    line: int     # line of the block's first code line
    code: str

    @property
    def name(self) -> str:
        return f"{self.source}:{self.line}"


def markdown_blocks(path: Path) -> List[Block]:
    text = path.read_text()
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        line = text.count("\n", 0, match.start(1)) + 1
        blocks.append(Block(str(path.relative_to(REPO_ROOT)), line, match.group(1)))
    return blocks


def rst_blocks(path: Path) -> List[Block]:
    text = path.read_text()
    blocks = []
    pattern = r"^\.\. code-block:: python\n(?:   :\w+:.*\n)*\n((?:(?: {3,}.*)?\n)+)"
    for match in re.finditer(pattern, text, re.M):
        line = text.count("\n", 0, match.start(1)) + 1
        blocks.append(Block(str(path.relative_to(REPO_ROOT)), line,
                            textwrap.dedent(match.group(1))))
    return blocks


def all_blocks() -> List[Block]:
    blocks = markdown_blocks(REPO_ROOT / "README.md")
    for path in sorted((REPO_ROOT / "docs").glob("*.md")):
        blocks += markdown_blocks(path)
    for path in sorted((REPO_ROOT / "docs").glob("*.rst")):
        blocks += rst_blocks(path)
    return blocks


BLOCKS = all_blocks()


def is_fragment(block: Block) -> bool:
    return block.code.lstrip().startswith(FRAGMENT_MARK)


def needs_alf(block: Block) -> bool:
    return bool(ALF_IMPORT.search(block.code))


def test_blocks_are_found_and_fragments_are_few():
    sources = {block.source for block in BLOCKS}
    assert {"README.md", "docs/quickstart.rst", "docs/training.rst"} <= sources
    fragments = [block.name for block in BLOCKS if is_fragment(block)]
    assert len(fragments) <= MAX_FRAGMENTS, f"too many fragments: {fragments}"
    for block in BLOCKS:
        if is_fragment(block):
            reason = block.code.lstrip()[len(FRAGMENT_MARK):].split("\n", 1)[0].strip()
            assert reason, f"{block.name}: say why it is a fragment"
    alf_blocks = [block for block in BLOCKS if needs_alf(block)]
    assert all(block.source == "docs/migration.rst" for block in alf_blocks), alf_blocks


def runs_as_a_file(block: Block) -> bool:
    """Whether the test runs ``block`` (else it only compiles it)."""
    return not is_fragment(block) and not (needs_alf(block)
                                           and importlib.util.find_spec("alf") is None)


def run_block(block: Block, folder: Path) -> subprocess.CompletedProcess:
    """Runs ``block`` saved as a file of its own in ``folder``, by a fresh interpreter."""
    script = folder / f"{Path(block.source).stem}_{block.line}.py"
    script.write_text(block.code)
    # One torch thread: blocks that train a little stay quick on a busy machine.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=180, env=env)


@pytest.fixture(scope="module")
def block_runs(request, tmp_path_factory) -> RunTable:
    """The blocks of the selected tests that run, ``CONCURRENCY`` at a time (each is
    mostly a fresh interpreter's imports)."""
    folder = tmp_path_factory.mktemp("doc_blocks")
    return RunTable([b for b in selected_params(request, "block") if runs_as_a_file(b)],
                    lambda block: run_block(block, folder), CONCURRENCY)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_block_runs_as_its_own_file(block, block_runs):
    if not runs_as_a_file(block):
        # A fragment, or ALF's own API (runs where ALF is installed): it must
        # still be valid Python.
        compile(block.code, block.name, "exec")
        return
    proc = block_runs.outcome(block)
    assert proc.returncode == 0, f"{block.name} failed on its own:\n{proc.stderr}"
    for snippet, outputs in EXPECTED_OUTPUT.items():
        if snippet in block.code:
            for output in outputs:
                assert output in proc.stdout, (block.name, output, proc.stdout)


def test_every_expected_output_belongs_to_a_block():
    for snippet in EXPECTED_OUTPUT:
        assert any(snippet in block.code for block in BLOCKS), snippet
