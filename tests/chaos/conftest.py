"""The chaos test uses the integration tests' fixtures and helpers
(tests/python): their conftest is loaded under a name of its own and its
fixtures offered here."""
import importlib.util
import os
import sys

_PYTHON_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
sys.path.insert(0, _PYTHON_TESTS)
_spec = importlib.util.spec_from_file_location("gs_python_conftest",
                                               os.path.join(_PYTHON_TESTS, "conftest.py"))
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
globals().update({k: v for k, v in vars(_conftest).items() if not k.startswith("__")})
