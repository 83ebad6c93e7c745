"""The control plane: worker processes, the pipe protocol, start and shutdown."""
