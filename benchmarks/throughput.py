"""Throughput benchmark: a thin wrapper around :mod:`alf_env.bench`.

The implementation lives in the package so that it works on a fresh install as
the ``alf-env-bench`` console script (also ``python -m alf_env.bench``); this
file only keeps the old path working. Run ``python benchmarks/throughput.py
--help`` for the options.
"""

import sys

from alf_env.bench import main

if __name__ == "__main__":
    sys.exit(main())
