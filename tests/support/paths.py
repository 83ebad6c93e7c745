"""Paths the tests need: the repository root, for scripts, docs and examples."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
