"""PYTHON filters used by the tests (importable on executors as tests.jobs.custom_filters)."""


def region_is_hangzhou(message, context):
    return message["properties"].get("region") == "杭州"


def always_fails(message, context):
    raise RuntimeError("user code failed")
