"""plygrad-cpu: the CPU backend (C through the system compiler, loaded with cffi). See `backend.py`.

Import `plygrad.backends.cpu.backend` for the classes; this package module stays empty so that the registry's
import of `descriptor` stays cheap.
"""
