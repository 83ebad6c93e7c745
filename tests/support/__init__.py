"""Helpers shared by the test suite: test environments, fault drivers, paths.

Every test module imports its helpers from here (``tests.support.*``), never
from another test module.
"""
