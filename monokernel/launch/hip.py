"""Loading AMDGCN code objects and launching them through the HIP runtime (ctypes on
libamdhip64): the `--backend hip` of the tools.

    from monokernel.launch.hip import HipKernel
    hk = HipKernel(code_object_bytes, kernel)      # hipModuleLoadData + hipModuleGetFunction
    hk.launch(dict(x=x_gpu, n=1024), grid=256)     # hipModuleLaunchKernel, kernargs packed

UNTESTED ON HARDWARE: no AMD GPU is available to the project. What is tested on CPU is the
kernarg packing (`pack_kernargs`: every explicit argument at its `ir.ABI` offset, the buffer
padded to the code object's kernarg segment size, which `tools.lint` checks against the same
ABI) and the clear error where the library is absent. The kernargs travel as one buffer
(HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END in `extra`); the runtime fills the hidden
arguments of code object v5 after the explicit ones. Our kernels use static LDS only, so the
launch asks for no dynamic shared memory. A persistent grid must be co-resident: launch one
CTA per CU (MI355X 256, MI300X 304) on an otherwise idle device.

Pointer slots take a ROCm torch tensor (its data_ptr) or a raw device address (int); scalar
slots a Python number (packed as monokernel.launch.cuda packs them). Errors are `HipError`s
naming the call and the kernel; a machine without libamdhip64 gets `HipUnavailable`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

import numpy as np

from ..ir import Kernel, Ptr

HIP_LAUNCH_PARAM_BUFFER_POINTER = 0x01
HIP_LAUNCH_PARAM_BUFFER_SIZE = 0x02
HIP_LAUNCH_PARAM_END = 0x03


class HipError(RuntimeError):
    """A HIP runtime call failed (the message names the call, the kernel and the error)."""


class HipUnavailable(HipError):
    """libamdhip64 cannot be loaded on this machine."""


_LIB = None


def _candidates() -> list[str]:
    out = []
    if os.environ.get("MONOKERNEL_HIP_LIB"):
        out.append(os.environ["MONOKERNEL_HIP_LIB"])
    for root in (os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm"):
        if root:
            out.append(os.path.join(root, "lib", "libamdhip64.so"))
    found = ctypes.util.find_library("amdhip64")
    if found:
        out.append(found)
    out.append("libamdhip64.so")
    return out


def library():
    """The loaded libamdhip64 (ctypes.CDLL), or HipUnavailable with where it looked."""
    global _LIB
    if _LIB is not None:
        return _LIB
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})" if os.path.sep in path else path)
            continue
        lib.hipGetErrorString.restype = ctypes.c_char_p
        _LIB = lib
        return lib
    raise HipUnavailable(
        "the HIP runtime (libamdhip64.so) is not on this machine: --backend hip needs an AMD "
        "GPU with ROCm (set ROCM_PATH or MONOKERNEL_HIP_LIB to the library); tried "
        + ", ".join(tried))


def available() -> bool:
    try:
        library()
    except HipError:
        return False
    return True


def _check(err: int, what: str, kernel: str = ""):
    if err != 0:
        lib = library()
        text = lib.hipGetErrorString(err)
        text = text.decode() if text else f"error {err}"
        where = f"kernel {kernel}: " if kernel else ""
        raise HipError(f"{where}{what} failed with {text} ({err})")


def _address(name: str, v) -> int:
    if hasattr(v, "data_ptr"):
        return int(v.data_ptr())
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    raise HipError(f"argument {name!r} must be a device tensor or address, got {type(v).__name__}")


def pack_kernargs(kernel: Kernel, args: dict, size: int | None = None) -> bytes:
    """The kernarg segment: each explicit argument at its ABI offset (pointers as 64-bit
    addresses, scalars in their dtype), zero-padded to `size` (the code object's
    kernarg_segment_size; default: the ABI's size)."""
    from .cuda import _scalar_bytes
    abi = kernel.abi
    names = abi.names()
    extra = sorted(set(args) - set(names))
    missing = [n for n in names if n not in args]
    if extra or missing:
        raise HipError(f"kernel {kernel.name}: arguments {extra} are not in its ABI and "
                       f"{missing} are missing; the ABI is {names}")
    size = abi.size if size is None else int(size)
    if size < abi.size:
        raise HipError(f"kernel {kernel.name}: kernarg segment of {size} bytes is smaller than "
                       f"the ABI's {abi.size}")
    buf = bytearray(size)
    for s in abi.slots:
        v = args[s.name]
        if isinstance(s.kind, Ptr):
            raw = np.array([_address(s.name, v)], np.uint64).tobytes()
        else:
            raw = _scalar_bytes(s.name, s.kind.dtype, v)
        buf[s.offset:s.offset + len(raw)] = raw
    return bytes(buf)


class HipKernel:
    """One code object loaded on the current HIP device; `launch(args, grid=...)`."""

    def __init__(self, code_object: bytes, kernel: Kernel):
        from ..codeobject import read_code_object
        self.kernel = kernel
        self.name = kernel.name
        info = read_code_object(code_object).kernel(kernel.name)
        self.kernarg_size = info.kernarg_segment_size
        self.lib = lib = library()
        self._image = ctypes.create_string_buffer(bytes(code_object), len(code_object))
        self.module = ctypes.c_void_p()
        _check(lib.hipModuleLoadData(ctypes.byref(self.module), self._image),
               "hipModuleLoadData", self.name)
        self.function = ctypes.c_void_p()
        _check(lib.hipModuleGetFunction(ctypes.byref(self.function), self.module,
                                        self.name.encode()), "hipModuleGetFunction", self.name)

    def launch(self, args: dict, *, grid: int, stream=None, sync: bool = True):
        """hipModuleLaunchKernel on `grid` CTAs of kernel.threads threads (stream: a torch
        stream, a raw hipStream_t int, or None for the null stream)."""
        lib = self.lib
        if grid < 1:
            raise HipError(f"kernel {self.name}: grid {grid} must be at least 1")
        data = pack_kernargs(self.kernel, args, self.kernarg_size)
        buf = ctypes.create_string_buffer(data, len(data))
        size = ctypes.c_size_t(len(data))
        extra = (ctypes.c_void_p * 5)(HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buf),
                                      HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size),
                                      HIP_LAUNCH_PARAM_END)
        handle = getattr(stream, "cuda_stream", stream) or 0
        u = ctypes.c_uint
        _check(lib.hipModuleLaunchKernel(self.function, u(grid), u(1), u(1),
                                         u(self.kernel.threads), u(1), u(1), u(0),
                                         ctypes.c_void_p(int(handle)), None, extra),
               f"hipModuleLaunchKernel(grid={grid}, block={self.kernel.threads})", self.name)
        if sync:
            _check(lib.hipStreamSynchronize(ctypes.c_void_p(int(handle))),
                   "running (hipStreamSynchronize)", self.name)

    def __del__(self):
        if getattr(self, "module", None) is not None and getattr(self.module, "value", None):
            try:
                self.lib.hipModuleUnload(self.module)
            except Exception:
                pass


__all__ = ["HipKernel", "HipError", "HipUnavailable", "pack_kernargs", "library", "available"]
