"""Re-export (public import path): ProcessEnvironment and its pipe protocol live in :mod:`alf_env.control_plane`."""

from alf_env.control_plane.process_environment import (  # noqa: F401
    START_METHODS, CLOSE_POLITE_TIMEOUT, CLOSE_TERMINATE_TIMEOUT, CLOSE_KILL_TIMEOUT,
    EXIT_POLITE_TIMEOUT, EXIT_TERMINATE_TIMEOUT, EXIT_KILL_TIMEOUT, SIGTERM_EXIT_CODE,
    MessageType, RemoteException, RemoteMethod, start_parent_watchdog, worker_signals,
    SYNC_PROGRESS_CALL, forward_progress, serve, handle_message, register_board, shutdown,
    stop_all, ProcessEnvironment, resolve_all, start_environments, wait_start_all, close_all,)

__all__ = ['START_METHODS', 'CLOSE_POLITE_TIMEOUT', 'CLOSE_TERMINATE_TIMEOUT', 'CLOSE_KILL_TIMEOUT', 'EXIT_POLITE_TIMEOUT', 'EXIT_TERMINATE_TIMEOUT', 'EXIT_KILL_TIMEOUT', 'SIGTERM_EXIT_CODE', 'MessageType', 'RemoteException', 'RemoteMethod', 'start_parent_watchdog', 'worker_signals', 'SYNC_PROGRESS_CALL', 'forward_progress', 'serve', 'handle_message', 'register_board', 'shutdown', 'stop_all', 'ProcessEnvironment', 'resolve_all', 'start_environments', 'wait_start_all', 'close_all']
