"""The job's own failure kinds, each with its exit code (store damage has schemas.errors.CorruptStoreError)."""


class UsageError(ValueError):
    """Bad arguments: an unknown expression type, a name that matches nothing, an existing OUT. Found before
    Spark starts; the job exits 2."""
