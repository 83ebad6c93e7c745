"""The gymnasium front end: FastVectorEnv."""
