"""Memory regions the judge shares with one candidate's worker, and tensors laid out in them.

A region is one allocation of its own, made by the judge and mapped by one worker:
- "cuda": device memory from `cuMemAlloc` through the driver API, exported with
  `cuIpcGetMemHandle`. The caching allocator is bypassed on purpose: PyTorch's own IPC exports a
  whole allocator segment, which can hold other tensors of the judge's, so a region is an
  allocation that holds nothing else;
- "host": a `memfd` (anonymous shared memory: nothing on disk, gone when the last process holding
  it ends), which the worker maps through `/proc/<judge pid>/fd/<fd>`. CPU runs use it, and so do
  CUDA runs where the driver cannot share device memory between processes (some sandboxes): the
  worker then copies its inputs to the device and its outputs back, a host round trip per step
  (pinned, where the driver allows it).

The judge reads only regions it allocated, at offsets it checks against their size, so a worker
that reports a wrong layout gets a failed check, never a read outside the region.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any, Optional

import torch

from harness.core.config import Device
from harness.core.errors import one_line
from harness.core.protocol import RegionHandle, RegionKind, TensorSpec
from harness.device.cuda_driver import IpcHandle, check, driver

ALIGN = 256  # every tensor in a region starts on this boundary (any dtype's alignment)
GUARD = 4096  # bytes of poison after every tensor in a region (a write past its end lands there)
POISON = 0xA5  # the guard bands' byte


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def spec_of(tensor: torch.Tensor, offset: int) -> TensorSpec:
    """Where `tensor` lies once it is written at `offset` bytes into a region."""
    return TensorSpec(offset, tuple(int(s) for s in tensor.shape), dtype_name(tensor.dtype), tensor.element_size())


def dtype_of(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def layout(tensors: list[torch.Tensor], start: int = 0) -> tuple[list[TensorSpec], int]:
    """Specs packing `tensors` one after another from `start`, each followed by a guard band of
    GUARD bytes, and the end offset."""
    specs = []
    offset = aligned(start)
    for t in tensors:
        specs.append(spec_of(t, offset))
        offset = aligned(offset + t.numel() * t.element_size() + GUARD)
    return specs, offset


def view(region: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    """The tensor `spec` describes, as a view into `region` (a flat uint8 tensor); ValueError when
    the spec does not lie inside the region."""
    dtype = dtype_of(spec.dtype)
    if any(not isinstance(s, int) or s < 0 for s in spec.shape):
        raise ValueError(f"bad shape {spec.shape}")
    end = spec.offset + spec.nbytes
    if spec.offset < 0 or spec.offset % ALIGN or end > region.numel():
        raise ValueError(
            f"a {spec.nbytes}-byte tensor at offset {spec.offset} does not lie in the {region.numel()}-byte region"
        )
    return region[spec.offset : end].view(dtype).view(spec.shape)


def write(region: torch.Tensor, tensors: list[torch.Tensor], specs: list[TensorSpec]) -> None:
    """Each tensor into its place, and poison into the guard band after it. A tensor with no values
    of its own (`unmaterialised`) is refused before its data is touched (ValueError)."""
    for position, (tensor, spec) in enumerate(zip(tensors, specs)):
        lazy = unmaterialised(tensor)
        if lazy:
            raise ValueError(f"tensor {position} {lazy}")
        view(region, spec).copy_(tensor.detach().reshape(spec.shape))
        _guard(region, spec).fill_(POISON)


PLAIN = (torch.Tensor, torch.nn.Parameter)  # the types whose values lie in their storage, as their sizes say


def unmaterialised(tensor: torch.Tensor) -> str:
    """Why `tensor` holds no values of its own to copy ("" when it does), to be said after "output":
    a tensor subclass (its own code answers for its sizes and data: a wrapper subclass has no
    storage, a lazy one computes only when read), the meta device, or a storage smaller than its
    sizes, strides and offset reach. Asked before its data is touched, of its type first (type()
    runs none of a subclass's code); a tensor that raises when asked is one too. Sparse and nested
    tensors are not: they have values, in another layout."""
    kind = type(tensor)
    if kind not in PLAIN:
        name = f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', '?')}"
        return (
            f"is a torch.Tensor subclass ({name[:120]}), not a plain tensor: its shape and values come from its own "
            "code (a lazy output)"
        )
    try:
        if tensor.is_meta:
            return "is on the meta device: a shape with no values (a lazy output)"
        if tensor.layout != torch.strided or tensor.is_nested or tensor.numel() == 0:
            return ""
        reach = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
        need = (tensor.storage_offset() + reach + 1) * tensor.element_size()
        storage = tensor.untyped_storage()
        have = storage.nbytes()
        held = have >= need and storage.data_ptr() != 0
    except Exception as exc:
        return f"cannot say where its values are ({one_line(exc, 200)}): a lazy output"
    if held:
        return ""
    return (
        f"has shape {tuple(tensor.shape)}, whose strides and offset reach {need} bytes, but a storage of {have} "
        "bytes (a lazy output)"
    )


def guard_broken(region: torch.Tensor, specs: list[TensorSpec]) -> Optional[tuple[int, int]]:
    """(position, bytes changed) of the first tensor whose guard band no longer holds the poison
    `write` put there: something wrote past its end. None when every band is intact."""
    for position, spec in enumerate(specs):
        changed = band_changes(_guard(region, spec))
        if changed:
            return position, changed
    return None


def band_changes(band: torch.Tensor) -> int:
    """Bytes of a guard band that no longer hold the poison."""
    return int((band != POISON).sum())


def past_end(position: int, changed: int, label: str) -> str:
    """The unsafe-memory finding for a broken guard band, in one line."""
    return (
        f"forward wrote past the end of input {position} ({changed} of the {GUARD} guard bytes after it changed, "
        f"{label})"
    )


def _guard(region: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    end = spec.offset + spec.nbytes
    return region[end : min(end + GUARD, region.numel())]


class _CudaMemory:
    """A device pointer exposed to torch.as_tensor without a copy (the CUDA array interface)."""

    def __init__(self, pointer: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (pointer, False),
            "version": 2,
            "strides": None,
        }


class Region:
    """A shared allocation: `tensor` is its flat uint8 view in this process."""

    def __init__(self, kind: str, nbytes: int, tensor: torch.Tensor, handle: str, release: Any) -> None:
        self.kind = kind
        self.nbytes = nbytes
        self.tensor = tensor
        self.handle = RegionHandle(kind, nbytes, handle)
        self._release = release

    @classmethod
    def allocate(cls, nbytes: int, device: torch.device, kind: str = "") -> "Region":
        """A new region owned by this process (the judge): device memory (kind "cuda", the
        default on a CUDA device) or host shared memory ("host")."""
        nbytes = max(int(nbytes), ALIGN)
        kind = kind or (RegionKind.CUDA if device.type == Device.CUDA else RegionKind.HOST)
        if kind == RegionKind.CUDA:
            torch.cuda.synchronize(device)  # the primary context is current on this thread
            lib = driver()
            pointer = ctypes.c_uint64()
            check(lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes)), "cuMemAlloc")
            handle = IpcHandle()
            result = lib.cuIpcGetMemHandle(ctypes.byref(handle), pointer)
            if result != 0:
                lib.cuMemFree_v2(pointer)
                check(result, "cuIpcGetMemHandle")
            tensor = torch.as_tensor(_CudaMemory(pointer.value, nbytes), device=device)
            return cls(
                RegionKind.CUDA,
                nbytes,
                tensor,
                bytes(handle.reserved).hex(),
                lambda: check(lib.cuMemFree_v2(pointer), "cuMemFree"),
            )
        fd = os.memfd_create("harness-region")
        try:
            os.ftruncate(fd, nbytes)
            memory = mmap.mmap(fd, nbytes)
        except BaseException:
            os.close(fd)
            raise
        tensor = torch.frombuffer(memory, dtype=torch.uint8)
        unpin = _pin(tensor, device)

        def release() -> None:
            unpin()
            try:
                memory.close()
            except BufferError:
                pass  # a view is still alive; the mapping goes with the process
            os.close(fd)

        return cls(RegionKind.HOST, nbytes, tensor, f"/proc/{os.getpid()}/fd/{fd}", release)

    @classmethod
    def open(cls, handle: RegionHandle, device: torch.device) -> "Region":
        """Map a region another process exported (in the worker)."""
        if handle.kind == RegionKind.CUDA:
            torch.cuda.synchronize(device)
            lib = driver()
            raw = IpcHandle()
            raw.reserved = bytes.fromhex(handle.handle)
            pointer = ctypes.c_uint64()
            check(lib.cuIpcOpenMemHandle_v2(ctypes.byref(pointer), raw, 1), "cuIpcOpenMemHandle")
            tensor = torch.as_tensor(_CudaMemory(pointer.value, handle.nbytes), device=device)
            return cls(RegionKind.CUDA, handle.nbytes, tensor, handle.handle, lambda: lib.cuIpcCloseMemHandle(pointer))
        fd = os.open(handle.handle, os.O_RDWR)
        try:
            memory = mmap.mmap(fd, handle.nbytes)
        finally:
            os.close(fd)
        tensor = torch.frombuffer(memory, dtype=torch.uint8)
        return cls(RegionKind.HOST, handle.nbytes, tensor, handle.handle, _pin(tensor, device))

    def free(self) -> None:
        """Release the allocation. The judge calls this only once the worker that mapped it has ended."""
        self.tensor = torch.empty(0, dtype=torch.uint8)
        release, self._release = self._release, None
        if release is not None:
            release()


def _pin(tensor: torch.Tensor, device: torch.device) -> Any:
    """Page-lock host memory a CUDA device copies to and from (a faster DMA); returns the undo.
    Where the driver refuses, copies go through pageable memory, slower but the same."""
    if device.type != Device.CUDA or tensor.numel() == 0:
        return lambda: None
    cudart = torch.cuda.cudart()
    pointer = tensor.data_ptr()
    try:
        if int(cudart.cudaHostRegister(pointer, tensor.numel(), 0)) != 0:
            return lambda: None
    except Exception:
        return lambda: None
    return lambda: cudart.cudaHostUnregister(pointer)


_ipc: Optional[bool] = None


def device_sharing() -> bool:
    """Can another process map this process's device memory (CUDA IPC)? Probed once per process:
    a child process (no torch: harness.device.cuda_driver) opens a handle to a small region made here."""
    global _ipc
    if _ipc is None:
        import subprocess
        import sys

        region = Region.allocate(ALIGN, torch.device("cuda", torch.cuda.current_device()), "cuda")
        try:
            probe = subprocess.run(
                [sys.executable, "-m", "harness.device.cuda_driver", region.handle.handle],
                capture_output=True,
                text=True,
                timeout=60,
            )
            _ipc = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _ipc = False
        finally:
            region.free()
    return _ipc
