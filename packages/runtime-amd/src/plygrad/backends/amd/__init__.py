"""plygrad-amd: the AMD backend (HIP compiled to AMDGPU code objects by hiprtc or clang, run through the HIP runtime).

Import `plygrad.backends.amd.backend` for the classes; this package module stays empty so that the registry's
import of `descriptor` stays cheap, and nothing here touches the HIP runtime until the factory runs.
"""
