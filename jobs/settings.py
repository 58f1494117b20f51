"""Job settings: conf/replay.json (or --conf FILE) over built-in defaults."""
import json
import os

DEFAULTS = {
    "split_size_mb": 128, "bloom_f": 20, "bloom_n": 32, "rocketmq_version": "5", "from": "earliest",
    "retry_subscriptions": True, "filter_support_retry": False, "with_body": True, "on_corrupt": "fail",
    "verify_crc": False, "max_body_mb": 64, "spark": {},
}
DEFAULT_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "replay.json")


def load_settings(path=None):
    """Defaults, updated by the settings file; unknown keys are an error (a typo must not pass silently)."""
    settings = dict(DEFAULTS)
    path = path or (DEFAULT_FILE if os.path.exists(DEFAULT_FILE) else None)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                loaded = json.load(f)
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read job settings {path}: {exc}") from exc
        unknown = sorted(k for k in loaded if k not in DEFAULTS and not k.startswith("_"))
        if unknown:
            raise ValueError(f"{path}: unknown settings {', '.join(unknown)}")
        settings.update({k: v for k, v in loaded.items() if not k.startswith("_")})
    if settings["on_corrupt"] not in ("fail", "skip"):
        raise ValueError("on_corrupt must be fail or skip")
    if str(settings["rocketmq_version"]) not in ("4", "5"):
        raise ValueError("rocketmq_version must be 4 or 5")
    return settings
