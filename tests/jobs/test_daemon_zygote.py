"""The job's daemon forked from the driver's preloaded zygote (jobs/runtime/daemon_zygote.py): the process the JVM
starts hands over its pipes, environment, arguments and folder, stands in for the daemon until it exits and passes it
the JVM's SIGTERM; without a usable zygote it is left to become the daemon itself."""
import os
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from jobs.runtime import daemon_zygote

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# a zygote whose preload is a word and whose daemon says what it was given, then echoes a line of its stdin
ZYGOTE = textwrap.dedent("""
    import os, signal, socket, sys
    from jobs.runtime import daemon_zygote

    def prepare():
        if os.environ.get("FAIL_PRELOAD"):
            raise RuntimeError("no numba here")
        return "preloaded"

    def daemon(prepared):
        print("daemon", prepared, os.getpid(), os.getppid(), os.environ.get("ASKED"), sys.argv[1:], os.getcwd(),
              flush=True)
        line = sys.stdin.readline().strip()
        if line == "wait":
            signal.pause()
        print("echo", line, flush=True)

    daemon_zygote.serve(socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2]), prepare, daemon)
""")
STAND_IN = textwrap.dedent("""
    import os, sys
    from jobs.runtime import daemon_zygote

    sys.argv[1:] = ["pyspark.worker"]
    print("stand-in", os.getpid(), daemon_zygote.spawn(os.environ["MQREPLAY_ZYGOTE"]), file=sys.stderr, flush=True)
""")


def _env(**extra):
    return dict(os.environ, PYTHONPATH=ROOT, **extra)


def _start_zygote(**env):
    """A zygote of the script above, its socket listening in a private folder before it starts (as the driver's):
    (the socket's path, its process, its lifeline's end)."""
    path = os.path.join(tempfile.mkdtemp(prefix="mqreplay-zygote-test-"), "socket")
    theirs, ours = os.pipe()
    with daemon_zygote.listening(path) as listener:
        proc = subprocess.Popen([sys.executable, "-c", ZYGOTE, str(listener.fileno()), str(theirs)],
                                pass_fds=(listener.fileno(), theirs), cwd="/", env=_env(**env),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    os.close(theirs)
    return path, proc, ours


@pytest.fixture
def zygote():
    path, proc, ours = _start_zygote()
    yield path, proc, ours
    if proc.poll() is None:
        os.close(ours)
        proc.wait(30)


def _stand_in(path, tmp_path, **env):
    return subprocess.Popen([sys.executable, "-c", STAND_IN], cwd=tmp_path, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(MQREPLAY_ZYGOTE=path, **env))


def _waiting_daemon(path, tmp_path):
    """A stand-in and the pid of the daemon forked for it, which waits until it is stopped."""
    stand_in = _stand_in(path, tmp_path)
    stand_in.stdin.write("wait\n")
    stand_in.stdin.flush()
    return stand_in, int(stand_in.stdout.readline().split()[2])


def test_the_daemon_forked_by_the_zygote_gets_the_stand_ins_pipes_environment_arguments_and_folder(zygote, tmp_path):
    path, proc, _ = zygote
    stand_in = _stand_in(path, tmp_path, ASKED="by the JVM")
    out, err = stand_in.communicate("hello\n", timeout=60)
    words = out.splitlines()[0].split(" ", 8)
    assert words[:2] == ["daemon", "preloaded"]
    assert int(words[3]) == proc.pid  # the zygote's child, not the stand-in's
    assert words[4:] == ["by", "the", "JVM", "['pyspark.worker']", str(tmp_path)]
    assert out.splitlines()[1] == "echo hello"  # read from the stand-in's stdin, written to its stdout
    assert err.split() == ["stand-in", str(stand_in.pid), "True"]  # it waited for the daemon, then exited
    assert stand_in.returncode == 0


def test_the_jvms_sigterm_to_the_stand_in_stops_the_daemon(zygote, tmp_path):
    stand_in, daemon = _waiting_daemon(zygote[0], tmp_path)
    stand_in.send_signal(signal.SIGTERM)
    assert stand_in.wait(30) == 0
    with pytest.raises(ProcessLookupError):  # gone (and reaped by the zygote within its second's poll)
        for _ in range(60):
            os.kill(daemon, 0)
            time.sleep(0.1)


def test_the_zygote_exits_and_removes_its_folder_when_the_driver_lets_go_and_its_daemons_run_on(zygote, tmp_path):
    path, proc, lifeline = zygote
    stand_in, daemon = _waiting_daemon(path, tmp_path)
    os.close(lifeline)
    assert proc.wait(30) == 0
    assert not os.path.exists(os.path.dirname(path))
    os.kill(daemon, 0)  # still there, and its stand-in with it
    assert stand_in.poll() is None
    stand_in.send_signal(signal.SIGTERM)
    assert stand_in.wait(30) == 0


def test_without_a_zygote_the_stand_in_is_left_to_become_the_daemon(tmp_path):
    stand_in = _stand_in(str(tmp_path / "no-socket"), tmp_path)
    _, err = stand_in.communicate("", timeout=60)
    assert err.split() == ["stand-in", str(stand_in.pid), "False"]


def test_a_zygote_whose_preload_failed_forks_nothing_and_leaves_the_stand_in_to_preload(tmp_path):
    path, zygote, ours = _start_zygote(FAIL_PRELOAD="1")
    stand_in = _stand_in(path, tmp_path)  # asks at once: it waits in the backlog until the zygote has failed
    _, err = stand_in.communicate("", timeout=60)
    assert err.split() == ["stand-in", str(stand_in.pid), "False"]
    assert zygote.wait(30) != 0 and "no numba here" in zygote.stderr.read()
    assert not os.path.exists(os.path.dirname(path))
    os.close(ours)


def test_pysparks_daemon_forked_from_the_preloaded_zygote_speaks_to_the_process_that_started_it(tmp_path):
    """The real thing: the zygote the driver starts (the job's preload) and the daemon module as the JVM runs it;
    PySpark's daemon then writes its port to the stand-in's stdout and exits when its stdin closes."""
    started = daemon_zygote.start(sys.executable)
    try:
        stand_in = subprocess.Popen([sys.executable, "-m", "jobs.runtime.worker_daemon", "pyspark.worker"],
                                    cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=_env(MQREPLAY_DAEMON_LOG="1", **started.env))
        port = struct.unpack("!i", stand_in.stdout.read(4))[0]
        assert 0 < port < 65536
        stand_in.stdin.close()  # the JVM's way to stop its daemon
        err = stand_in.stderr.read().decode()
        assert stand_in.wait(60) == 0, err
        assert "kernels loaded, forked from the driver's zygote" in err
    finally:
        daemon_zygote.stop()
    assert started.process.wait(30) == 0
    assert not os.path.exists(started.folder)


def test_the_driver_removes_the_folder_of_a_zygote_that_was_killed():
    started = daemon_zygote.start(sys.executable)
    started.process.kill()  # as a kill of the whole process group would: no way out through its own cleanup
    started.process.wait(30)
    assert os.path.exists(started.folder)
    daemon_zygote.stop()
    assert not os.path.exists(started.folder)
