"""The Stable-Baselines3 front end: FastSubprocVecEnv."""
