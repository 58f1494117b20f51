"""A local S3-compatible server for the tests and the bench: moto's server mode (PyPI `moto[server]`), started
on 127.0.0.1 on a free port and stopped by its own process id. Its access log (one line per request) is
what the bench counts: every read the job makes of a store on S3 is a request there.

Picked over rclone's `serve s3` and MinIO: both are binaries outside PyPI, Debian and npm, the only
registries this project's machines reach; moto is one pip install, pinned in setup.cfg."""
import collections
import os
import re
import socket
import subprocess
import sys
import time

import pyarrow.fs as pafs

KEYS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
_COLOR = r"(?:\x1b\[[0-9;]*m)*"  # werkzeug colours its log lines by status
_REQUEST = re.compile(rf'"{_COLOR}(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/[\d.]+{_COLOR}" (\d+)')


class LocalS3:
    """A running moto server: `endpoint` (host:port), `env` (the variables a client needs), `filesystem()`."""

    def __init__(self, log_path=None):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log_path = log_path
        log = open(log_path, "w") if log_path else subprocess.DEVNULL
        self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})  # a line per request, at once
        deadline = time.time() + 30
        while not listening(self.port):
            if time.time() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"moto's S3 server did not start on {self.endpoint}")
            time.sleep(0.1)
        self.env = {**KEYS, "AWS_ENDPOINT_URL": f"http://{self.endpoint}"}

    def filesystem(self):
        return pafs.S3FileSystem(endpoint_override=self.endpoint, scheme="http", access_key=KEYS["AWS_ACCESS_KEY_ID"],
                                 secret_key=KEYS["AWS_SECRET_ACCESS_KEY"], region=KEYS["AWS_DEFAULT_REGION"],
                                 allow_bucket_creation=True)

    def upload(self, local_dir, bucket, prefix):
        """Copy a local folder to s3://bucket/prefix (the bucket made when missing)."""
        fs = self.filesystem()
        fs.create_dir(bucket)
        pafs.copy_files(str(local_dir), f"{bucket}/{prefix}", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def request_counts(log_path, start_line=0):
    """{(method, folder): requests} of the server's log from `start_line` on: folder is the store folder a key
    is under (commitlog, consumequeue, consumequeue_ext, config, ...), or the key's first part. A range
    read is a GET answered 206."""
    counts = collections.Counter()
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in list(f)[start_line:]:
            found = _REQUEST.search(line)
            if not found:
                continue
            method, path, status = found.groups()
            parts = path.split("?", 1)[0].strip("/").split("/")
            folder = next((p for p in parts if p in ("commitlog", "consumequeue", "consumequeue_ext", "config")),
                          parts[1] if len(parts) > 1 else parts[0])
            counts[("GET range" if method == "GET" and status == "206" else method, folder)] += 1
    return counts


def log_lines(log_path):
    with open(log_path, encoding="utf-8", errors="replace") as f:
        return sum(1 for _ in f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
