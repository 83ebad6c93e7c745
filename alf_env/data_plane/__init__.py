"""The data plane: the shared block, the job board and the workers' job loop."""
