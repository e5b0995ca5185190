"""The test suite, one folder per layer (see ``conftest.py``)."""
