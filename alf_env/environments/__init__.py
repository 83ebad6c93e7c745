"""ALF-style environments: the ``AlfEnvironment`` interface and its implementations.

Import the submodules directly, e.g.
``from alf_env.environments.alf_gym_wrapper import AlfGymWrapper``.
"""
