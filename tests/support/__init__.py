"""Helpers shared by the tests: harnesses, agents modules for worker subprocesses, servers."""
