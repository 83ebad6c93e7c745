"""alf_env: fast, reliable multi-process RL environments.

The main names are re-exported here; see ``shared/API.md`` for the contract.
"""

__version__ = "0.1.0"
