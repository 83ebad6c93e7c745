"""``python -m alf_env``: ``alf-env-bench`` where pip's scripts directory is not on ``PATH``."""

import sys

from alf_env.bench import main

if __name__ == "__main__":
    sys.exit(main())
