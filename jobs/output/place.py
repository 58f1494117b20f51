"""Where a run writes: OUT, its temporary sibling, a warehouse and its tables' locations, each a folder on a
pyarrow filesystem. A URI becomes a filesystem here and only here, once per run on the driver (`Place.of`); the
object is handed down and shipped to the tasks (pyarrow filesystems pickle), so that no module resolves OUT or a
warehouse again (on S3 each resolve builds a client, and every task did it again)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Union

import pyarrow.fs as pafs

from schemas.store import storefs


@dataclass(frozen=True)
class Place:
    """A folder: its pyarrow filesystem, its path on it, and the URI it was given as (for messages and the
    catalog, which take URIs)."""

    fs: pafs.FileSystem
    root: str
    uri: str

    @classmethod
    def of(cls, where: Union[Place, str]) -> Place:
        """The Place of a URI or path, resolved once; a Place as it is."""
        if isinstance(where, Place):
            return where
        fs, root = storefs.resolve(where)
        return cls(fs, root, str(where))

    def path(self, relative: str) -> str:
        """The path of `relative` (a/b) under the folder."""
        return f"{self.root}/{relative}" if relative else self.root

    def create_folder_in_place(self, relative: str) -> None:
        """Create the folder `relative` (a/b) inside this folder, never this folder itself: on a local disk
        level by level, each mkdir failing once its parent is gone. A task still writing after its run removed
        the temporary OUT (a Python worker of a cancelled stage lives on until Spark's kill timeout) then fails
        instead of making OUT.tmp-* again. (An object store has no folders to fail on: a late object there is
        a stale temporary, which the next run on OUT removes.)"""
        if not isinstance(self.fs, pafs.LocalFileSystem):
            self.fs.create_dir(self.path(relative), recursive=True)
            return
        folder = self.root
        for name in relative.split("/"):
            folder = f"{folder}/{name}"
            self.fs.create_dir(folder, recursive=False)

    def sibling(self, suffix: str) -> Place:
        """The folder `<root><suffix>` beside this one (OUT.tmp-<run>, OUT.claim): scheme, host, query kept."""
        return Place(self.fs, self.root.rstrip("/") + suffix, storefs.sibling_uri(self.uri, suffix))

    def under(self, uri: str) -> Optional[Place]:
        """The Place of a URI inside this folder (a table's location inside its warehouse), on this filesystem;
        None when it is not inside."""
        base, uri = self.uri.rstrip("/"), str(uri)
        if uri != base and not uri.startswith(base + "/"):
            return None
        return Place(self.fs, self.root.rstrip("/") + uri[len(base):], uri)

    @property
    def renames(self) -> bool:
        """Whether a rename here is one step (local disks, HDFS), not a copy of every object (S3, GCS)."""
        return isinstance(self.fs, (pafs.LocalFileSystem, pafs.HadoopFileSystem))


@lru_cache(maxsize=16)
def warehouse(uri: Optional[str]) -> Optional[Place]:
    """A warehouse's Place, resolved once in a process however often its tables are asked for (None: unknown)."""
    return Place.of(uri) if uri else None


def location(warehouse_uri: Optional[str], uri: str) -> Place:
    """The Place of a table's location: inside its warehouse's Place (no new filesystem), else its own."""
    found = warehouse(warehouse_uri)
    return (found.under(uri) if found is not None else None) or Place.of(uri)
