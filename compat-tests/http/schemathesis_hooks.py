"""schemathesis hooks for compat-tests/http/run.sh (loaded through SCHEMATHESIS_HOOKS).

schemathesis reuses names it read in answers (a topic list includes __consumer_offsets) as
inputs to other operations. Kafka lets an admin delete, grow or reconfigure an internal topic, and
v3 serves what Kafka allows; doing it here would take the fixture's consumer group (and every
later group answer) with it. So a request that would change a topic whose name starts with `__`
is sent to a topic that does not exist instead, and checked as such (404); reading one is left as
it is.
"""

import schemathesis

CHANGING_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
STAND_IN = "st-not-an-internal-topic"


@schemathesis.hook
def before_call(context, case, kwargs):
    topic = (case.path_parameters or {}).get("topic_name")
    if (
        case.method.upper() in CHANGING_METHODS
        and isinstance(topic, str)
        and topic.startswith("__")
    ):
        case.path_parameters["topic_name"] = STAND_IN
