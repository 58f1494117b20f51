"""A store as a whole: its files on any filesystem (storefs.py), its layout (store.py), config/ (config.py), the
checks of its files, the local reading API and the dump."""
