"""A stand-in for aiconfigurator in tests (README.md beside this folder)."""
