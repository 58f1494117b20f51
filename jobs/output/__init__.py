"""OUT: claimed (claim.py), resolved once (place.py), shaped by a layout (layouts.py), written by the tasks (writers.py)
and published whole (publish.py), with the command's fingerprint (command.py)."""
