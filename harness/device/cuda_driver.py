"""The few CUDA driver calls the data plane makes through ctypes, with no torch import.

`python -m harness.device.cuda_driver HANDLE` is the probe a judge runs once: a fresh process that opens
an IPC handle of the judge's and exits 0 when the driver lets it (harness.device.regions.device_sharing).
Without torch it starts in a fraction of a second.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional


class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


_driver: Optional[Any] = None


def driver() -> Any:
    """libcuda, loaded once."""
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), IpcHandle, ctypes.c_uint]
        _driver = lib
    return _driver


def check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"CUDA driver error {result} in {what}")


CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06


def persisting_l2() -> int:
    """The current context's persisting-L2 limit in bytes (the L2 set aside for accesses marked
    persisting, which a flush does not evict); -1 when it cannot be read."""
    value = ctypes.c_size_t()
    return (
        int(value.value) if driver().cuCtxGetLimit(ctypes.byref(value), CU_LIMIT_PERSISTING_L2_CACHE_SIZE) == 0 else -1
    )


def reset_persisting_l2() -> int:
    """Set the current context's persisting-L2 limit to 0 and turn every persisting line back to
    normal, so the next flush evicts everything. Returns the limit found; RuntimeError when the
    limit does not read 0 afterwards."""
    lib = driver()
    found = persisting_l2()
    check(lib.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(0)), "cuCtxSetLimit(persisting L2)")
    check(lib.cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache")
    if persisting_l2() != 0:
        raise RuntimeError("the persisting-L2 limit does not read 0 after it was reset")
    return max(found, 0)


def can_open(handle: str) -> bool:
    """In a process with no CUDA context yet: open the IPC handle on device 0, then close it."""
    lib = driver()
    device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for result in (
        lib.cuInit(0),
        lib.cuDeviceGet(ctypes.byref(device), 0),
        lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
        lib.cuCtxSetCurrent(context),
    ):
        if result != 0:
            return False
    raw = IpcHandle()
    raw.reserved = bytes.fromhex(handle)
    if lib.cuIpcOpenMemHandle_v2(ctypes.byref(pointer), raw, 1) != 0:
        return False
    lib.cuIpcCloseMemHandle(pointer)
    return True


if __name__ == "__main__":
    sys.exit(0 if can_open(sys.argv[1]) else 1)
