"""plygrad-disk: the DISK backend (a file mapped into memory as a device). See `backend.py`.

Import `plygrad.backends.disk.backend` for the classes; this package module stays empty so that the registry's
import of `descriptor` stays cheap.
"""
