"""The parent <-> worker pipe protocol: its messages and the wire's constants.

The parent (:class:`~alf_env.control_plane.process_environment.ProcessEnvironment`)
and the worker (:func:`~alf_env.control_plane.worker.serve`) exchange
``(MessageType, payload)`` tuples over a ``multiprocessing`` pipe:

================  ======  ====================================================
message           sender  payload / meaning
================  ======  ====================================================
``READY``         worker  ``None``: the env was constructed; calls may follow.
``ACCESS``        parent  attribute name: read ``getattr(env, name)``.
``CALL``          parent  ``(name, args, kwargs)``: call ``env.name(...)``.
``RESULT``        worker  the answer to the request before it (any message the
                          parent sends); in the native loop also a
                          ``FastVectorEnv`` worker's report of a finished job
                          (infos and final observations that did not fit the
                          rows), which the front end reads after the job.
``EXCEPTION``     worker  a :class:`~alf_env.control_plane.remote.RemoteException`:
                          what went wrong, whole.
``CLOSE``         parent  ``None``: close the env, answer ``RESULT`` and exit.
``FAST_LOOP``     parent  a ``FastLoopSpec`` (see
                          :class:`~alf_env.control_plane.worker.FastLoopEntry`):
                          attach to the shared region, answer ``RESULT``, then
                          serve step/reset jobs from the native job slot until
                          it says CLOSE; pipe requests are then served when
                          the slot says CALL.
``STEP_PACKED``   parent  the action as one packed record
                          (:mod:`~alf_env.control_plane.leaf_codec`): step;
                          answered by ``RESULT`` with a packed time step.
``RESET_PACKED``  parent  ``None``: reset; answered like ``STEP_PACKED``.
================  ======  ====================================================

Every request is answered by exactly one ``RESULT`` or ``EXCEPTION``, in order
(see :mod:`alf_env.control_plane.channel` for how the parent matches answers
to requests).
"""

import enum
import functools
import pickle

START_METHODS = ("fork", "spawn", "forkserver")

# After the worker's sentinel fires, how long to wait for data it may have
# written just before exiting (an exception report) to become readable.
_DEATH_GRACE = 0.05


class MessageType(enum.Enum):
    """The messages of the parent <-> worker pipe protocol (see module doc)."""
    READY = 1
    ACCESS = 2
    CALL = 3
    RESULT = 4
    EXCEPTION = 5
    CLOSE = 6
    FAST_LOOP = 7
    STEP_PACKED = 8   # payload: the action as one packed record (leaf_codec)
    RESET_PACKED = 9  # payload: None; both answered by RESULT with a packed time step


# Messages whose payload is plain data (bytes, None): pickled by the plain
# pickler, which costs about half of what ``Connection.send`` costs (it builds
# a ``ForkingPickler`` with multiprocessing's reducers for every message).
# The bytes on the pipe are the same, so ``Connection.recv`` reads them.
_PLAIN_MESSAGES = frozenset([MessageType.STEP_PACKED, MessageType.RESET_PACKED])
_plain_dumps = functools.partial(pickle.dumps, protocol=pickle.HIGHEST_PROTOCOL)


class _State(enum.Enum):
    """Life cycle of a :class:`ProcessEnvironment`."""
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    DEAD = "dead"
    CLOSED = "closed"


# The CALL name of ProcessEnvironment.sync_progress: the worker forwards the
# progress to the env only if the env defines ``sync_progress`` (no env
# method can have this name).
SYNC_PROGRESS_CALL = "<sync_progress>"
