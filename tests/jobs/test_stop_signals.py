"""A stop signal to the PID a scheduler holds (the JVM, after the wrapper's exec) stops the run cleanly: one line
saying which signal stopped it and that nothing was published, no py4j stack and no "Connection refused", exit
128 + N, and the run's log file records that same exit code. SIGINT is handled as SIGTERM (PySpark's
SparkContext replaces Python's SIGINT handler; the job puts its own back)."""
import re
import signal

import pytest

from tests.jobs.test_scheduler_runs import _start_slow_run, _temporaries, _wait_for

pytestmark = [pytest.mark.spark, pytest.mark.system]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_to_the_jvm_is_one_line_and_the_same_exit_code_in_the_log(store_a, tmp_path, sig):
    out = tmp_path / "out"
    run = _start_slow_run(store_a, tmp_path, out)
    assert _wait_for(lambda: any((tmp_path / t / "_attempts").exists() for t in _temporaries(out)))
    run.send_signal(sig)
    console = run.communicate(timeout=120)[0].decode("utf-8", "replace")
    assert run.returncode == 128 + sig, console[-3000:]
    errors = [line for line in console.splitlines() if line.startswith("error:")]
    assert errors == [f"error: stopped by {sig.name}: the run stopped, nothing was published"], console[-3000:]
    assert "Traceback" not in console and "Connection refused" not in console and "Py4J" not in console
    log_file = re.search(r"^log: (\S+)", console, re.M).group(1)
    with open(log_file, encoding="utf-8") as f:
        exits = re.findall(r"mqreplay: exit (\d+)", f.read())
    assert exits == [str(128 + sig)]
    assert not out.exists() and _temporaries(out) == []
