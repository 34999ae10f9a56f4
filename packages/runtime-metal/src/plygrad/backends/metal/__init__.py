"""plygrad-metal: the Apple Metal backend (Metal Shading Language built by the Metal framework, run on the GPU through
the Objective-C runtime with ctypes). macOS only; elsewhere the registry records it as unavailable.

Import `plygrad.backends.metal.backend` for the classes; this package module stays empty so that the registry's
import of `descriptor` stays cheap, and nothing here touches the Objective-C runtime until the factory runs.
"""
