"""Stand-in for kafka-python's test/service.py, which its sdist does not ship.

The peer suite points kafka-python's integration fixtures at an external broker
(KAFKA_URI), so only ExternalService is ever built; SpawnedService would start a
Kafka from a local install and is refused.
"""


class ExternalService:
    def __init__(self, host, port):
        self.host = host
        self.port = port

    def open(self):
        pass

    def start(self):
        pass

    def stop(self):
        pass

    def close(self):
        pass

    def wait_for(self, pattern, timeout=30):  # noqa: ARG002 - same signature as the original
        return True

    def dump_logs(self):
        pass


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this suite runs against an external broker (KAFKA_URI) only")
