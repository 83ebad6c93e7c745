"""alf_env.bench.once_stderr: a repeated third-party warning is shown once."""

import subprocess
import sys
import textwrap

from tests.support.paths import REPO_ROOT

SCRIPT = textwrap.dedent(r'''
    import subprocess, sys
    from alf_env.bench.once_stderr import OnceStderr

    C_WARNING = "import os; os.write(2, b'WARNING: attribute x is deprecated\\n\\n')"
    PY_WARNING = "import warnings; warnings.warn('old API', DeprecationWarning, stacklevel=1)"
    with OnceStderr() as once:
        for _ in range(5):  # five child processes, as a bench starts workers
            subprocess.run([sys.executable, "-c", C_WARNING], check=True)
            subprocess.run([sys.executable, "-W", "always", "-c", PY_WARNING], check=True)
        subprocess.run([sys.executable, "-c", "raise ValueError('boom')"])
        sys.stderr.write("a line of our own\n")
        once.stream.write("straight to the terminal\n")
        sys.stderr.flush()
    sys.stderr.write(f"dropped {once.dropped}\n")
''')


def test_repeated_warnings_of_child_processes_are_shown_once_and_the_rest_passes():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert err.count("WARNING: attribute x is deprecated") == 1, err
    assert err.count("DeprecationWarning: old API") == 1, err
    assert "Traceback (most recent call last)" in err and "ValueError: boom" in err
    assert "a line of our own" in err and "straight to the terminal" in err
    assert "dropped 8" in err, err  # 4 repeats of each of the two warnings
