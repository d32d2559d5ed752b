"""Frontend tests use the shared prepared directories of tests/conftest.py."""
