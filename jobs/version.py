"""The package's version, for --version: the standard library only, so that it answers before the job's modules
(numba, pyarrow) load."""
import os


def package_version() -> str:
    """The installed package's version (setup.cfg's, read back when the checkout is not installed)."""
    from importlib import metadata

    try:
        return metadata.version("mqreplay")
    except metadata.PackageNotFoundError:
        import configparser

        cfg = configparser.ConfigParser()
        cfg.read(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.cfg"))
        return cfg.get("metadata", "version", fallback="unknown")
