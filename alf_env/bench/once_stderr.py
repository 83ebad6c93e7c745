"""Third-party warnings once: the bench's stderr with repeated warnings dropped.

Every process the bench starts builds envs, and some libraries warn on every
construction, from C (MuJoCo's ``WARNING: compiler attribute ...``) or from
Python's ``warnings`` (once per process, so once per worker). :class:`OnceStderr`
points file descriptor 2 of this process, and so of every child it starts, at a
pipe; a thread copies what arrives to the real stderr, dropping a warning it has
already shown (with the indented lines that belong to it). Everything else,
tracebacks included, passes unchanged.
"""

import os
import re
import threading
from typing import Any, Optional, Set, TextIO

#: A line that starts a warning: C libraries' ``WARNING: ...`` and Python's
#: ``path:line: SomethingWarning: ...``.
WARNING_LINE = re.compile(rb"^(\s*WARNING:|\S.*?:\d+: \w*Warning: )")
#: Seconds ``stop()`` waits for children that still hold the pipe.
DRAIN_TIMEOUT = 2.0


class OnceStderr:
    """Shows each distinct warning line once; a context manager.

    Attributes:
        stream: a text stream on the real stderr (for output that must not go
            through the filter, such as a progress bar that redraws a line).
        dropped: how many repeated warnings were dropped so far.
    """

    def __init__(self) -> None:
        self.stream: Optional[TextIO] = None
        self.dropped = 0
        self._seen: Set[bytes] = set()
        self._saved_fd = -1
        self._thread: Optional[threading.Thread] = None
        self._read_fd = -1

    def start(self) -> "OnceStderr":
        """Redirects fd 2 through the filter."""
        self._saved_fd = os.dup(2)
        self.stream = os.fdopen(os.dup(self._saved_fd), "w", buffering=1)
        self._read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        # The thread writes to a descriptor of its own, which it closes when the
        # pipe ends: it may outlive stop() while a child still holds the pipe.
        self._thread = threading.Thread(target=self._copy, args=(os.dup(self._saved_fd),),
                                        name="bench-once-stderr", daemon=True)
        self._thread.start()
        return self

    def _keep(self, line: bytes, dropping: bool) -> bool:
        """Whether to show ``line``; ``dropping``: the last warning was dropped."""
        if WARNING_LINE.match(line):
            if line in self._seen:
                self.dropped += 1
                return False
            self._seen.add(line)
            return True
        # The indented source line of a Python warning, or the blank line after
        # a C warning, goes with the warning it follows.
        return not (dropping and (not line.strip() or line[:1].isspace()))

    def _copy(self, out_fd: int) -> None:
        pending = b""
        dropping = False
        with os.fdopen(self._read_fd, "rb", buffering=0) as source, \
                os.fdopen(out_fd, "wb", buffering=0) as out_file:
            while chunk := source.read(65536):
                *lines, pending = (pending + chunk).split(b"\n")
                out = []
                for line in lines:
                    keep = self._keep(line, dropping)
                    dropping = not keep
                    if keep:
                        out.append(line + b"\n")
                if out:
                    out_file.write(b"".join(out))
            if pending:
                out_file.write(pending)

    def stop(self) -> None:
        """Puts the real stderr back and shows what is left; repeat-safe."""
        if self._saved_fd < 0:
            return
        import sys

        sys.stderr.flush()
        os.dup2(self._saved_fd, 2)  # the pipe's last writer here is gone
        if self._thread is not None:
            self._thread.join(DRAIN_TIMEOUT)  # children may still hold the pipe
        os.close(self._saved_fd)
        self._saved_fd = -1
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    def __enter__(self) -> "OnceStderr":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
