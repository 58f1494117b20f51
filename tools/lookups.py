"""Count a store's filesystem lookups (files opened, reads made), as an object store would bill them.

Inside `counting()`, every filesystem the code resolves (`schemas.store.storefs.resolve`) is a pyarrow
PyFileSystem wrapping the real one, which counts per path; it reads like a remote filesystem (no
memory maps), so every read of the driver and of the tasks passes through it."""
import collections
import contextlib
import threading

import pyarrow as pa
import pyarrow.fs as pafs

from schemas.store import storefs

CQ, EXT, COMMITLOG = "/consumequeue/", "/consumequeue_ext/", "/commitlog/"


class Lookups:
    """Opens and reads per path (the driver's probes run in threads on a filesystem that is not local)."""

    def __init__(self):
        self.opens = collections.Counter()
        self.reads = collections.Counter()
        self.lock = threading.Lock()

    def add(self, counter, path):
        with self.lock:
            counter[path] += 1

    def count(self, kind=CQ):
        """(opens, reads) of the paths under one kind of folder (CQ, EXT, COMMITLOG)."""
        return (sum(n for p, n in self.opens.items() if kind in p),
                sum(n for p, n in self.reads.items() if kind in p))

    def reset(self):
        self.opens.clear()
        self.reads.clear()


class _CountingReader:
    """The file object behind a pa.PythonFile: a read_at is one seek and one read."""

    def __init__(self, f, path, lookups):
        self.f, self.path, self.lookups = f, path, lookups
        self.closed = False

    def read(self, n=-1):
        self.lookups.add(self.lookups.reads, self.path)
        return self.f.read() if n is None or n < 0 else self.f.read(n)

    def seek(self, pos, whence=0):
        return self.f.seek(pos, whence)

    def tell(self):
        return self.f.tell()

    def size(self):
        return self.f.size()

    def close(self):
        self.closed = True
        self.f.close()


class _CountingHandler(pafs.FileSystemHandler):
    """Delegates to `fs`; counts the files opened for reading and their reads."""

    def __init__(self, fs, lookups):
        self.fs, self.lookups = fs, lookups

    def open_input_file(self, path):
        self.lookups.add(self.lookups.opens, path)
        return pa.PythonFile(_CountingReader(self.fs.open_input_file(path), path, self.lookups), mode="r")

    def open_input_stream(self, path):
        return self.open_input_file(path)

    def get_type_name(self):
        return "counting+" + self.fs.type_name

    def normalize_path(self, path):
        return self.fs.normalize_path(path)

    def get_file_info(self, paths):
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.fs.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise NotImplementedError("not on a store")

    def delete_file(self, path):
        self.fs.delete_file(path)

    def move(self, src, dest):
        self.fs.move(src, dest)

    def copy_file(self, src, dest):
        self.fs.copy_file(src, dest)

    def open_output_stream(self, path, metadata):
        return self.fs.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path, metadata):
        return self.fs.open_append_stream(path, metadata=metadata)


@contextlib.contextmanager
def counting():
    """Yields a Lookups that counts every open and read made through storefs until the block ends."""
    lookups = Lookups()
    real = storefs.resolve

    def resolve(uri):
        fs, path = real(uri)
        return pafs.PyFileSystem(_CountingHandler(fs, lookups)), path

    storefs.resolve = resolve
    try:
        yield lookups
    finally:
        storefs.resolve = real
