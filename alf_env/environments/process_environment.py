"""Re-export (public import path): ProcessEnvironment and its pipe protocol live in
:mod:`alf_env.control_plane`."""

from alf_env.control_plane.channel import resolve_all
from alf_env.control_plane.launch import close_all
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.protocol import START_METHODS, MessageType
from alf_env.control_plane.remote import RemoteException
from alf_env.control_plane.shutdown import shutdown

__all__ = ['MessageType', 'ProcessEnvironment', 'START_METHODS', 'RemoteException',
           'resolve_all', 'close_all', 'shutdown']
