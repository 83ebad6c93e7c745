"""``python -m alf_env``: the same as ``alf-env-bench`` (see :mod:`alf_env.bench`).

Useful where pip's scripts directory is not on ``PATH``.
"""

import sys

from alf_env.bench import main

if __name__ == "__main__":
    sys.exit(main())
