"""plygrad-nv: the NVIDIA backend (CUDA C compiled to cubins by NVRTC or nvcc, run through the CUDA driver API).

Import `plygrad.backends.nv.backend` for the classes; this package module stays empty so that the registry's
import of `descriptor` stays cheap, and nothing here touches the driver until the factory runs.
"""
