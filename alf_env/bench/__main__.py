"""``python -m alf_env.bench``: the same as ``alf-env-bench``."""

import sys

from alf_env.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
