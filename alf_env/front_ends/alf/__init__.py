"""The ALF front ends: ParallelAlfEnvironment, FastParallelEnvironment, create_environment."""
