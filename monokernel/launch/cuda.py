"""Loading PTX and launching persistent kernels through the CUDA driver (cuda.bindings).

    from monokernel.launch.cuda import CudaKernel
    ck = CudaKernel(kernel)                 # builds PTX (monokernel.backend.nvptx) and loads it
    ck(x=x_gpu, out=out_gpu, n=1024)        # one CTA per SM, cooperative, synchronised
    ck.launch(dict(...), grid=8, sync=False)

Arguments are packed from the kernel's ABI (`ir.ABI`): a `Ptr` slot takes a CUDA torch
tensor (its data_ptr) or a raw device address (int); a `Scalar` slot takes a Python number,
converted to the slot's dtype (range-checked for integers; bf16/fp8 through
monokernel.numerics, the IR's own rounding). Every CTA of a persistent grid must be resident
at once (tagged-pair hand-offs between CTAs spin otherwise), so launches are cooperative
(`cuLaunchCooperativeKernel`) and the grid is checked against the occupancy API first. The
kernel's LDS is dynamic shared memory (the NVPTX backend declares it `extern .shared`); above
48 KiB the function's dynamic-shared limit is raised first. Driver errors become `CudaError`s
naming the kernel.

This module imports only numpy, torch and cuda.bindings (the H200 machine has nothing else),
and those lazily: a CPU machine without cuda.bindings can import it.
"""
from __future__ import annotations

import threading
import warnings

import numpy as np

from .. import numerics
from ..ir import TENSOR_MAP_BYTES, Kernel, Ptr, TensorMap, derived_args

DEFAULT_DYNAMIC_SMEM = 48 * 1024  # what a function may use without raising its limit
_JIT_LOG_BYTES = 1 << 16


class CudaError(RuntimeError):
    """A CUDA driver call failed (the message names the kernel and the driver's error)."""

    def __init__(self, message: str, *, code=None, kernel: str = ""):
        super().__init__(message)
        self.code = code
        self.kernel = kernel


class LaunchError(CudaError):
    """A launch that cannot run as asked (grid does not fit, bad arguments, ...)."""


_DRIVER = None
_LOCK = threading.Lock()


def driver():
    """cuda.bindings.driver, imported on first use (cuInit done)."""
    global _DRIVER
    if _DRIVER is None:
        with _LOCK:
            if _DRIVER is None:
                try:
                    from cuda.bindings import driver as drv
                except ImportError as e:  # pragma: no cover - depends on the machine
                    raise ImportError("monokernel.launch.cuda needs the cuda-bindings package "
                                      "(cuda.bindings.driver)") from e
                _check(drv, drv.cuInit(0), "cuInit")
                _DRIVER = drv
    return _DRIVER


def available() -> bool:
    """True if torch sees a CUDA GPU and cuda.bindings imports."""
    try:
        import torch
        if not torch.cuda.is_available():
            return False
        from cuda.bindings import driver as _  # noqa: F401
    except Exception:
        return False
    return True


def _err_text(drv, err) -> str:
    try:
        name = drv.cuGetErrorName(err)[1]
        desc = drv.cuGetErrorString(err)[1]
        name = name.decode() if isinstance(name, bytes) else str(name)
        desc = desc.decode() if isinstance(desc, bytes) else str(desc)
        return f"{name}: {desc}"
    except Exception:  # pragma: no cover
        return str(err)


def _check(drv, result, what: str, kernel: str = "", extra: str = ""):
    """Unpack a cuda.bindings result tuple; raise CudaError on failure."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if err != drv.CUresult.CUDA_SUCCESS:
        where = f"kernel {kernel}: " if kernel else ""
        msg = f"{where}{what} failed with {_err_text(drv, err)}"
        if extra:
            msg += "\n" + extra
        raise CudaError(msg, code=err, kernel=kernel)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def _device_index(device) -> int:
    import torch
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"not a CUDA device: {device!r}")
    return d.index if d.index is not None else torch.cuda.current_device()


_TORCH_READY: set = set()


def _ensure_context(index: int):
    """Make the device's primary context (the one torch uses) current on this thread."""
    import torch
    drv = driver()
    if index not in _TORCH_READY:
        torch.cuda.init()
        with torch.cuda.device(index):
            torch.empty(1, device=f"cuda:{index}")  # torch creates its primary context lazily
        _TORCH_READY.add(index)
    dev = _check(drv, drv.cuDeviceGet(index), "cuDeviceGet")
    ctx = _check(drv, drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    cur_dev = None
    if ctx is not None and int(ctx) != 0:
        cur_dev = _check(drv, drv.cuCtxGetDevice(), "cuCtxGetDevice")
    if cur_dev is None or int(cur_dev) != int(dev):
        pctx = _check(drv, drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check(drv, drv.cuCtxSetCurrent(pctx), "cuCtxSetCurrent")
    return dev


def _attr(drv, dev, name: str) -> int:
    a = getattr(drv.CUdevice_attribute, name)
    return int(_check(drv, drv.cuDeviceGetAttribute(a, dev), f"cuDeviceGetAttribute({name})"))


def load_module(ptx: str | bytes, kernel_name: str = ""):
    """cuModuleLoadDataEx on PTX text (JIT-compiled by the driver); returns the CUmodule.
    A JIT failure raises CudaError with the driver's error log."""
    drv = driver()
    data = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
    if not data.endswith(b"\0"):
        data += b"\0"
    image = np.frombuffer(data, dtype=np.uint8)
    opts = [drv.CUjit_option.CU_JIT_ERROR_LOG_BUFFER,
            drv.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    log = bytearray(_JIT_LOG_BYTES)
    try:
        res = drv.cuModuleLoadDataEx(image.ctypes.data, len(opts), opts, [log, _JIT_LOG_BYTES])
    except Exception:  # a cuda.bindings that takes the log buffer differently
        log = bytes(_JIT_LOG_BYTES)
        try:
            res = drv.cuModuleLoadDataEx(image.ctypes.data, len(opts), opts,
                                         [log, _JIT_LOG_BYTES])
        except Exception:
            log = b""
            res = drv.cuModuleLoadData(image.ctypes.data)
    text = bytes(log).split(b"\0", 1)[0].decode("utf-8", "replace").strip()
    return _check(drv, res, "cuModuleLoadDataEx (PTX JIT)", kernel_name,
                  extra=f"JIT log:\n{text}" if text else "")


def _scalar_bytes(name: str, dt, value) -> bytes:
    if isinstance(value, bool) and dt.name != "i1":
        value = int(value)
    if dt.name == "i1":
        return bytes([1 if value else 0])
    if dt.is_float:
        if dt.name in ("f32", "f64", "f16"):
            return np.array([value], dtype=dt.np).tobytes()
        return numerics.convert(np.array([float(value)]), "f64", dt).astype(dt.np).tobytes()
    if dt.is_ptr:
        raise LaunchError(f"argument {name!r}: pointer scalars are Ptr slots")
    v = int(value)
    info = np.iinfo(dt.np)
    if not info.min <= v <= info.max:
        raise LaunchError(f"argument {name!r} = {value} does not fit {dt}")
    return np.array([v], dtype=dt.np).tobytes()


def check_pdl(kernel: Kernel):
    """A kernel may be launched with pdl only if it has a grid_dep_wait (else it could read
    what the launch before it is still writing)."""
    if "grid_dep" not in kernel.uses:
        raise LaunchError(f"kernel {kernel.name}: launched with pdl but it has no grid_dep_wait; "
                          "it could read what the launch before it is still writing")


class CudaKernel:
    """One IR kernel loaded on one GPU: `launch(args, grid=...)` or call with keywords."""

    def __init__(self, kernel: Kernel, ptx: str | None = None, *, device=None,
                 sm: str = "sm_90a"):
        import torch  # noqa: F401  (the context is torch's primary context)
        self.kernel = kernel
        self.name = kernel.name
        if ptx is None:
            from ..backend.nvptx import build_ptx
            ptx = build_ptx(kernel, sm)
        self.ptx = ptx
        self.device = _device_index(device)
        drv = driver()
        self.dev = _ensure_context(self.device)
        self.module = load_module(ptx, self.name)
        self.function = _check(drv, drv.cuModuleGetFunction(self.module, self.name.encode()),
                               "cuModuleGetFunction", self.name)
        self.num_sms = _attr(drv, self.dev, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
        self.cooperative_ok = bool(_attr(drv, self.dev, "CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH"))
        self.smem = kernel.lds_bytes
        if self.smem > DEFAULT_DYNAMIC_SMEM:
            limit = _attr(drv, self.dev, "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
            if self.smem > limit:
                raise LaunchError(f"kernel {self.name}: {self.smem} bytes of LDS; a CTA of this "
                                  f"GPU may use at most {limit}")
            a = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(drv, drv.cuFuncSetAttribute(self.function, a, self.smem),
                   f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={self.smem})", self.name)
        per_sm = _check(drv, drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            self.function, kernel.threads, self.smem),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor", self.name)
        self.ctas_per_sm = int(per_sm)
        self.max_resident = self.ctas_per_sm * self.num_sms
        self.regs = self._fattr("CU_FUNC_ATTRIBUTE_NUM_REGS")
        self.local_bytes = self._fattr("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES")

    def _fattr(self, name: str) -> int:
        drv = driver()
        a = getattr(drv.CUfunction_attribute, name)
        return int(_check(drv, drv.cuFuncGetAttribute(a, self.function),
                          f"cuFuncGetAttribute({name})", self.name))

    # ------------------------------------------------------------------ arguments
    def pack(self, args: dict):
        """(keep-alive buffer, array of argument pointers) for kernelParams."""
        import torch
        abi = self.kernel.abi
        names = abi.names()
        derived = {s.name for s in derived_args(abi)}
        extra = sorted(set(args) - set(names) | (set(args) & derived))
        missing = [n for n in names if n not in args and n not in derived]
        if extra or missing:
            raise LaunchError(f"kernel {self.name}: arguments {extra} are not in its ABI and "
                              f"{missing} are missing; the ABI is {names}")
        slot_bytes = 8
        buf = np.zeros(len(abi.slots) * slot_bytes, dtype=np.uint8)
        for i, s in enumerate(abi.slots):
            v = self._tensor_map(s, args[s.kind.of]) if s.name in derived else args[s.name]
            if isinstance(s.kind, Ptr):
                if isinstance(v, torch.Tensor):
                    if not v.is_cuda or v.device.index != self.device:
                        raise LaunchError(f"kernel {self.name}: argument {s.name!r} is on "
                                          f"{v.device}, not cuda:{self.device}")
                    addr = v.data_ptr()
                elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                    addr = int(v)
                else:
                    raise LaunchError(f"kernel {self.name}: argument {s.name!r} must be a CUDA "
                                      f"tensor or a device address, got {type(v).__name__}")
                raw = np.array([addr], dtype=np.uint64).tobytes()
            else:
                try:
                    raw = _scalar_bytes(s.name, s.kind.dtype, v)
                except LaunchError as e:
                    raise LaunchError(f"kernel {self.name}: {e}") from None
            buf[i * slot_bytes:i * slot_bytes + len(raw)] = np.frombuffer(raw, np.uint8)
        ptrs = np.array([buf.ctypes.data + i * slot_bytes for i in range(len(abi.slots))],
                        dtype=np.uint64)
        return buf, ptrs

    def _tensor_map(self, slot, buf):
        """The device copy of the TMA descriptor `slot` (an ir.TensorMap) of tensor `buf`:
        its bytes as rows of row_bytes, boxes of box_rows rows of box_width bytes, encoded
        once per (address, size) and kept for the kernel's lifetime (the launch reads it from
        global memory)."""
        import torch
        tm: TensorMap = slot.kind
        if not isinstance(buf, torch.Tensor) or not buf.is_cuda:
            raise LaunchError(f"kernel {self.name}: the tensor map {slot.name!r} is derived from "
                              f"argument {tm.of!r}, which must be a CUDA tensor")
        nbytes = buf.numel() * buf.element_size()
        if nbytes % tm.row_bytes or buf.data_ptr() % 16:
            raise LaunchError(f"kernel {self.name}: {tm.of!r} ({nbytes} bytes at "
                              f"{buf.data_ptr():#x}) is not whole 16-byte-aligned rows of "
                              f"{tm.row_bytes} bytes for tensor map {slot.name!r}")
        cache = self.__dict__.setdefault("_tmaps", {})
        key = (slot.name, buf.data_ptr(), nbytes)
        if key not in cache:
            drv = driver()
            swz = drv.CUtensorMapSwizzle
            u32, u64 = drv.cuuint32_t, drv.cuuint64_t
            tmap = _check(drv, drv.cuTensorMapEncodeTiled(
                drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8, u32(2), buf.data_ptr(),
                [u64(tm.row_bytes), u64(nbytes // tm.row_bytes)], [u64(tm.row_bytes)],
                [u32(tm.box_width), u32(tm.box_rows)], [u32(1), u32(1)],
                drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                swz.CU_TENSOR_MAP_SWIZZLE_128B if tm.swizzle else swz.CU_TENSOR_MAP_SWIZZLE_NONE,
                drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                "cuTensorMapEncodeTiled", self.name, f" (tensor map {slot.name!r})")
            raw = np.array([int(x) for x in tmap.opaque], np.uint64).view(np.uint8)
            assert raw.size == TENSOR_MAP_BYTES, raw.size
            # from pinned memory: a launch inside a CUDA graph capture may be the first to
            # see this buffer, and a capture copies only from pinned memory; the copy then
            # becomes a node the graph replays before every launch (v50b: ~1-2 us each)
            if torch.cuda.is_current_stream_capturing():
                warnings.warn(f"kernel {self.name}: tensor map {slot.name!r} of a buffer first "
                              f"seen inside a CUDA graph capture; its {TENSOR_MAP_BYTES}-byte "
                              "host copy is captured and replayed with every launch: launch "
                              "once with these buffers before the capture",
                              RuntimeWarning, stacklevel=4)
            host = torch.from_numpy(raw.copy()).pin_memory()
            cache[key] = (host, host.to(f"cuda:{self.device}", non_blocking=True))
        return cache[key][1]

    # ------------------------------------------------------------------ launch
    def launch(self, args: dict, *, grid: int | None = None, stream=None, sync: bool = True,
               cooperative: bool = True, pdl: bool = False):
        """Launch on `grid` CTAs (default: one per SM) of kernel.threads threads. With
        `cooperative` the driver guarantees co-residency (required by persistent kernels
        that hand data between CTAs) and a grid larger than the occupancy API allows is
        refused; a plain launch (a kernel whose CTAs never wait on each other) may exceed it,
        the hardware then runs the CTAs in rounds. With `sync`, waits and raises a CudaError naming the kernel on failure.
        `pdl` (programmatic dependent launch, sm_90): this launch may start while the one
        before it in the stream still runs, once that one's CTAs passed grid_dep_launch (or
        ended); only a kernel with a grid_dep_wait may be launched so (its waves read nothing
        but Ptr(constant=True) buffers before it: the interpreter checks the kernel)."""
        import torch
        drv = driver()
        grid = self.num_sms if grid is None else int(grid)
        if grid < 1:
            raise LaunchError(f"kernel {self.name}: grid {grid} must be at least 1")
        if cooperative and grid > self.max_resident:
            raise LaunchError(
                f"kernel {self.name}: a persistent grid of {grid} CTAs cannot be co-resident: "
                f"{self.ctas_per_sm} CTA(s) of {self.kernel.threads} threads and {self.smem} "
                f"bytes of shared memory fit per SM, x {self.num_sms} SMs = {self.max_resident}")
        if pdl:
            check_pdl(self.kernel)
        if cooperative and not self.cooperative_ok:
            raise LaunchError(f"kernel {self.name}: device {self.device} has no cooperative launch")
        buf, ptrs = self.pack(args)
        _ensure_context(self.device)
        if stream is None:
            stream = torch.cuda.current_stream(self.device)
        handle = stream.cuda_stream if hasattr(stream, "cuda_stream") else int(stream)
        hs = drv.CUstream(handle)
        block = self.kernel.threads
        if pdl:
            res, what = self._launch_ex(drv, hs, grid, block, ptrs, cooperative)
        elif cooperative:
            res = drv.cuLaunchCooperativeKernel(self.function, grid, 1, 1, block, 1, 1,
                                                self.smem, hs, ptrs.ctypes.data)
            what = f"cuLaunchCooperativeKernel(grid={grid}, block={block}, smem={self.smem})"
        else:
            res = drv.cuLaunchKernel(self.function, grid, 1, 1, block, 1, 1, self.smem, hs,
                                     ptrs.ctypes.data, 0)
            what = f"cuLaunchKernel(grid={grid}, block={block}, smem={self.smem})"
        _check(drv, res, what, self.name)
        del buf, ptrs  # the driver copied the parameters at launch
        if sync:
            self.synchronize(stream)

    def _launch_ex(self, drv, hs, grid, block, ptrs, cooperative):
        """cuLaunchKernelEx with the programmatic stream serialization attribute (and the
        cooperative one): the launch path of pdl."""
        def attribute(name, field):
            at = drv.CUlaunchAttribute()
            at.id = getattr(drv.CUlaunchAttributeID, name)
            setattr(at.value, field, 1)
            return at
        attrs = [attribute("CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION",
                           "programmaticStreamSerializationAllowed")]
        if cooperative:
            attrs.append(attribute("CU_LAUNCH_ATTRIBUTE_COOPERATIVE", "cooperative"))
        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
        cfg.sharedMemBytes, cfg.hStream = self.smem, hs
        cfg.attrs, cfg.numAttrs = attrs, len(attrs)
        res = drv.cuLaunchKernelEx(cfg, self.function, ptrs.ctypes.data, 0)
        return res, (f"cuLaunchKernelEx(grid={grid}, block={block}, smem={self.smem}, pdl, "
                     f"cooperative={cooperative})")

    def synchronize(self, stream=None):
        import torch
        drv = driver()
        if stream is None:
            stream = torch.cuda.current_stream(self.device)
        handle = stream.cuda_stream if hasattr(stream, "cuda_stream") else int(stream)
        _check(drv, drv.cuStreamSynchronize(drv.CUstream(handle)),
               "running (cuStreamSynchronize)", self.name)

    def __call__(self, grid: int | None = None, **args):
        return self.launch(args, grid=grid)

    def __del__(self):
        mod = getattr(self, "module", None)
        if mod is not None and _DRIVER is not None:
            try:
                _DRIVER.cuModuleUnload(mod)
            except Exception:
                pass


_CACHE: dict = {}


def launch(kernel: Kernel, args: dict, *, grid: int | None = None, ptx: str | None = None,
           device=None, sync: bool = True, cooperative: bool = True,
           pdl: bool = False) -> CudaKernel:
    """Build (once per kernel object and device), load and launch. Returns the CudaKernel."""
    key = (id(kernel), _device_index(device))
    ck = _CACHE.get(key)
    if ck is None or ck.kernel is not kernel:
        ck = CudaKernel(kernel, ptx, device=device)
        _CACHE[key] = ck
    ck.launch(args, grid=grid, sync=sync, cooperative=cooperative, pdl=pdl)
    return ck


__all__ = ["CudaKernel", "CudaError", "LaunchError", "launch", "load_module", "available",
           "driver", "check_pdl"]
