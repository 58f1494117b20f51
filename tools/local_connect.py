"""A local Spark Connect server for the tests and the bench: the venv's own pyspark (its
`sbin/start-connect-server.sh --wait`, in the foreground), on 127.0.0.1 and a free port, its Python workers the
interpreter running this and the checkout on their path; stopped by its own process group. Logs go to
`log_dir`. The server runs in `cwd` (the checkout): relative local paths are taken from there, as Spark takes them."""
import os
import signal
import subprocess
import sys
import time

import pyspark

from tools.local_s3 import free_port, listening

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LocalConnect:
    """A running Connect server: `url` (sc://127.0.0.1:PORT)."""

    def __init__(self, log_dir, cwd=ROOT, timeout=240):
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        spark_home = os.path.dirname(pyspark.__file__)
        env = {**os.environ, "SPARK_HOME": spark_home, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOG_DIR": str(log_dir), "SPARK_PID_DIR": str(log_dir),
               "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
        self.log = open(os.path.join(log_dir, "connect-server.log"), "w")
        self.process = subprocess.Popen(
            ["bash", os.path.join(spark_home, "sbin", "start-connect-server.sh"), "--wait", "--master", "local[2]",
             "--conf", f"spark.connect.grpc.binding.port={self.port}", "--conf", "spark.ui.enabled=false"],
            cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while not listening(self.port):
            if time.time() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"the Spark Connect server did not start on {self.url}: see {self.log.name}")
            time.sleep(0.5)

    def stop(self):
        """Stop the server and everything it started (its process group: the JVM and its Python workers)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
