"""pytest plugin: a ``broker`` fixture, one Millrace broker per test module.

Use from a conftest.py:

    sys.path.insert(0, str(<repo>/compat-tests/lib))
    pytest_plugins = ["millrace_pytest"]
"""

from __future__ import annotations

import pytest

from millrace import Broker, install_sigterm_cleanup


def pytest_configure(config):  # noqa: ARG001
    install_sigterm_cleanup()


@pytest.fixture(scope="module")
def broker():
    """A fresh broker (own data dir, own port) for the whole test module."""
    b = Broker().start()
    try:
        yield b
    finally:
        died = not b.alive()
        rc = b.stop()
        if died:
            pytest.fail(
                f"broker process died during the tests (exit code {rc}); stderr tail:\n"
                f"{b.stderr_tail()}",
                pytrace=False,
            )
