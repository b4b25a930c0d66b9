import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

pytest_plugins = ["millrace_pytest"]


@pytest.fixture(scope="module")
def java_cp() -> str:
    """The Kafka 4.1.1 CLI tools classpath (console producer/consumer, kafka-configs), resolved
    with mvn on first use: secure_clients.java_tools_classpath."""
    from secure_clients import java_tools_classpath  # only where a test asks for it
    return java_tools_classpath()
