"""The Allocator of a GPU whose memory is device pointers behind a driver: the part every such backend shares.

`DeviceMemory` makes the device current before each driver call (drivers keep a current device or context per
host thread, and the runtime calls from worker threads too), gives a zero-byte buffer the null pointer without a
call, copies through `host_array`, and does the runtime's COPY between two devices of the same backend without the
host: on one GPU a device-to-device copy, between two a peer copy after the source GPU finished its work. A
backend's subclass says which driver calls do each (docs/backends.md, "The shared plumbing").
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

from plygrad.runtime.driver import host_array
from plygrad.runtime.plugin import Allocator


class GPU(Protocol):
    """What `DeviceMemory` asks of its backend."""

    def activate(self) -> None:
        """Make this GPU current on the calling thread."""

    def synchronize(self) -> None: ...


class DeviceMemory(Allocator[int]):
    """Device memory of one GPU; handles are device pointers (0 for zero bytes). A subclass gives the calls."""

    def __init__(self, device: GPU) -> None:
        self.device = device

    # ---- the driver calls a subclass gives (the device is current when they run) --------------------------------
    def device_alloc(self, nbytes: int) -> int:
        raise NotImplementedError

    def device_free(self, handle: int) -> None:
        raise NotImplementedError

    def to_device(self, dst: int, src_address: int, nbytes: int) -> None:
        raise NotImplementedError

    def to_host(self, dst_address: int, src: int, nbytes: int) -> None:
        raise NotImplementedError

    def on_device(self, dst: int, src: int, nbytes: int) -> None:
        """A copy within this GPU."""
        raise NotImplementedError

    def from_peer(self, dst: int, source: DeviceMemory, src: int, nbytes: int) -> None:
        """A copy from another GPU's memory (`source`) into this one's."""
        raise NotImplementedError

    def same_gpu(self, other: DeviceMemory) -> bool:
        raise NotImplementedError

    # ---- the Allocator ------------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        if nbytes == 0:
            return 0
        self.device.activate()
        return self.device_alloc(nbytes)

    def free(self, handle: int) -> None:
        if handle:
            self.device.activate()
            self.device_free(handle)

    def copyin(self, handle: int, src: memoryview) -> None:
        if src.nbytes:
            host = host_array(src)
            self.device.activate()
            self.to_device(handle, ctypes.addressof(host), src.nbytes)

    def copyout(self, dst: memoryview, handle: int) -> None:
        if dst.nbytes:
            host = host_array(dst)
            self.device.activate()
            self.to_host(ctypes.addressof(host), handle, dst.nbytes)

    def transfer(self, dst: int, source: Allocator[Any], src: Any, nbytes: int) -> bool:
        """The runtime's COPY from another device of this backend (ordered after the kernels launched before it on
        one GPU; after the source GPU finished its work between two); False for another kind of device."""
        if not isinstance(source, type(self)):
            return False
        if nbytes:
            if self.same_gpu(source):
                self.device.activate()
                self.on_device(dst, src, nbytes)
            else:
                source.device.synchronize()
                self.device.activate()
                self.from_peer(dst, source, src, nbytes)
        return True
