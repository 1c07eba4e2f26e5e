"""kiln from Python: compile ONNX models, load .kiln modules, run them on numpy arrays.

    import kiln
    m = kiln.compile("m.onnx", target="opencl", precision="fp16")
    m.save("m.kiln")
    s = kiln.load("m.kiln").session()          # on the module's target
    outputs = s.run({"input": x})               # a list of numpy arrays, in output order
    d = kiln.compile("detector.onnx")           # NonZero, NMS, If, Loop...: a StagedModel
    boxes, scores = d.session().run({"image": img})   # stages compiled per shape met
    d.save("detector.kiln")                     # its staged module, where it has one
    kiln.devices()                              # [{"name": "cpu:0", ...}, ...]

Everything goes through ctypes to libkiln (the compiler) and libkiln_rt (the
runtime); see kiln/_lib.py for where they are looked up.
"""
import ctypes
import os

import numpy as np

from . import _lib
from ._lib import Array, SYSTEM_ALLOCATOR, cc, rt

__all__ = ["KilnError", "Module", "Session", "StagedModel", "StagedSession", "compile", "load", "load_plugin", "devices", "__version__"]

__version__ = cc.kiln_version().decode()

# kiln_dtype_t codes (include/kiln/array.h) <-> numpy. float8 (13-16: e4m3fn, e4m3fnuz, e5m2,
# e5m2fnuz) travels as uint8 arrays of its codes, int4 / uint4 (17, 18) as int8 / uint8 arrays of
# one value a byte, as the session takes them (docs/DESIGN.md, "float8 and int4"); the module's
# own code goes with each input ("kiln_dtype").
_DTYPES = {1: np.float32, 2: np.float16, 3: np.int8, 4: np.uint8, 5: np.int32, 6: np.int64,
           7: np.bool_, 8: np.float64, 9: np.int16, 10: np.uint16, 11: np.uint32, 12: np.uint64,
           13: np.uint8, 14: np.uint8, 15: np.uint8, 16: np.uint8, 17: np.int8, 18: np.uint8}


class KilnError(RuntimeError):
    """A kiln_status_t: .code is its name ("INVALID_ARGUMENT", ...), the message says what and where."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _check(status):
    if not status:
        return
    code = rt.kiln_status_code_name(rt.kiln_status_code(status)).decode()
    msg = rt.kiln_status_message(status).decode(errors="replace")
    rt.kiln_status_free(status)
    raise KilnError(code, msg)


def _str(v):
    return None if v is None else v.decode(errors="replace")


def _shape(s):
    return tuple(int(s.dims[i]) for i in range(s.rank))


def _marshal(inputs, decls, slots):
    """Checks |inputs| ({name: array} or a list in order) against |decls| (the inputs' dicts)
    and points the kiln_array_t |slots| at them; returns the arrays, to be kept alive."""
    if isinstance(inputs, dict):
        extra = set(inputs) - {i["name"] for i in decls}
        if extra:
            raise KilnError("INVALID_ARGUMENT", f"no module input named {sorted(extra)}; the inputs are "
                            f"{[i['name'] for i in decls]}")
        missing = [i["name"] for i in decls if i["name"] not in inputs]
        if missing:
            raise KilnError("INVALID_ARGUMENT", f"missing input(s) {missing}")
        arrays = [inputs[i["name"]] for i in decls]
    else:
        arrays = list(inputs)
        if len(arrays) != len(decls):
            raise KilnError("INVALID_ARGUMENT", f"{len(arrays)} inputs given, the module has {len(decls)}")
    keep = []
    for k, (a, decl) in enumerate(zip(arrays, decls)):
        a = np.asarray(a)
        if a.dtype != decl["dtype"]:
            raise KilnError("INVALID_ARGUMENT", f"input '{decl['name']}': dtype {a.dtype}, the module takes "
                            f"{decl['dtype']}")
        if a.ndim > _lib.KILN_MAX_RANK:
            raise KilnError("INVALID_ARGUMENT", f"input '{decl['name']}': rank {a.ndim} > {_lib.KILN_MAX_RANK}")
        a = np.ascontiguousarray(a)
        keep.append(a)
        arr = slots[k]
        arr.dtype = decl.get("kiln_dtype") or next(c for c, t in _DTYPES.items() if np.dtype(t) == a.dtype)
        arr.shape.rank = a.ndim
        for d, n in enumerate(a.shape):
            arr.shape.dims[d] = n
        arr.data = a.ctypes.data
        arr.nbytes = a.nbytes
    return keep


def _collect(slots, n):
    """The |n| output arrays a run wrote into |slots|, copied into numpy arrays and freed."""
    outs = []
    for k in range(n):
        o = slots[k]
        shape = _shape(o.shape)
        dt = np.dtype(_DTYPES[o.dtype])
        buf = (ctypes.c_char * o.nbytes).from_address(o.data) if o.nbytes else b""
        outs.append(np.frombuffer(buf, dtype=dt).reshape(shape).copy())
        rt.kiln_array_free(SYSTEM_ALLOCATOR, ctypes.byref(o))
    return outs


class Module:
    """A compiled model: the .kiln bytes and the runtime's module loaded from them."""

    def __init__(self, data, name="<memory>", report=None, path=None):
        self._ptr = None
        self._data = None if data is None else bytes(data)
        self._path = path
        self.report = report or []  # the compile report (kiln.compile only): a list of dicts
        p = ctypes.c_void_p()
        if path is not None:  # mapped by the runtime, weights used in place (kiln.load)
            _check(rt.kiln_module_load_file(os.fspath(path).encode(), SYSTEM_ALLOCATOR, ctypes.byref(p)))
        else:
            _check(rt.kiln_module_load_memory(self._data, len(self._data), name.encode(), SYSTEM_ALLOCATOR,
                                              ctypes.byref(p)))
        self._ptr = p
        info = _lib.ModuleInfo()
        rt.kiln_module_info(self._ptr, ctypes.byref(info))
        self.info = {f: (_str(getattr(info, f)) if isinstance(getattr(info, f), bytes) else getattr(info, f))
                     for f, _ in _lib.ModuleInfo._fields_}
        self.inputs = [self._io(rt.kiln_module_input_name, rt.kiln_module_input_shape, i)
                       for i in range(info.n_inputs)]
        self.outputs = [self._io(rt.kiln_module_output_name, rt.kiln_module_output_shape, i)
                        for i in range(info.n_outputs)]

    def _io(self, name_fn, shape_fn, i):
        dt = ctypes.c_int()
        shape = shape_fn(self._ptr, i, ctypes.byref(dt))
        return {"name": _str(name_fn(self._ptr, i)), "shape": _shape(shape), "dtype": np.dtype(_DTYPES[dt.value]),
                "kiln_dtype": dt.value}

    @property
    def data(self):
        """The .kiln bytes (a loaded file's are read when first asked for)."""
        if self._data is None:
            with open(self._path, "rb") as f:
                self._data = f.read()
        return self._data

    @property
    def target(self):
        return self.info["target"]

    def save(self, path):
        """Writes the .kiln file (what kiln.load and `kiln-rt-run` read)."""
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(self.data)
        os.replace(tmp, path)

    def session(self, device=None, profile=False, threads=0, slots=1, cache_dir=None, strict=True,
                dim_reserve=0):
        """A session on |device| ("cpu", "opencl:1", ...; default: the module's target). A device
        that cannot be opened is an error (strict=False: the runtime falls back to the CPU, which
        then needs a CPU module). dim_reserve: for a module with a dynamic dim, allocate each
        slot's arena for that value at creation (0: the bottom of the range)."""
        return Session(self, device or self.target, profile=profile, threads=threads, slots=slots,
                       cache_dir=cache_dir, strict=strict, dim_reserve=dim_reserve)

    def __del__(self):
        if getattr(self, "_ptr", None):
            rt.kiln_module_release(self._ptr)
            self._ptr = None


class _Closing:
    """close() when collected or at the end of a with block."""

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Session(_Closing):
    """Runs a module on a device. Not thread-safe: one session per thread."""

    def __init__(self, module, device="cpu", profile=False, threads=0, slots=1, cache_dir=None, strict=True,
                 dim_reserve=0):
        self._ptr = None
        self._dev = None
        self.module = module
        d = ctypes.c_void_p()
        oo = _lib.DeviceOpenOptions(threads, strict, None)
        _check(rt.kiln_device_open(device.encode(), ctypes.byref(oo), SYSTEM_ALLOCATOR, ctypes.byref(d)))
        self._dev = d
        so = _lib.SessionOptions()
        rt.kiln_session_options_default(ctypes.byref(so))
        so.slots = slots
        so.profile = profile
        so.threads = threads
        so.dim_reserve = dim_reserve  # a module with a dynamic dim: arena for this value at creation
        if cache_dir:
            self._cache_dir = cache_dir.encode()
            so.cache_dir = self._cache_dir
        s = ctypes.c_void_p()
        _check(rt.kiln_session_create(module._ptr, self._dev, ctypes.byref(so), ctypes.byref(s)))
        self._ptr = s
        self.device = f"{_str(rt.kiln_device_api(self._dev))}: {_str(rt.kiln_device_name(self._dev))}"
        n_in, n_out = len(module.inputs), len(module.outputs)
        self._in = (Array * max(n_in, 1))()
        self._out = (Array * max(n_out, 1))()

    def run(self, inputs):
        """inputs: {name: numpy array} for every module input (or a list in input order).
        Returns the outputs as a list of numpy arrays in output order."""
        keep = _marshal(inputs, self.module.inputs, self._in)
        _check(rt.kiln_session_run(self._ptr, self._in, self._out))
        del keep
        return _collect(self._out, len(self.module.outputs))

    def profile(self):
        """Per dispatch of the profiled runs (profile=True), in dispatch order: a list of dicts
        with kernel, node, op, total_s (summed over runs), last_s, start_s, flops, bytes, runs and
        device (the device API that ran it: "cpu" for a heterogeneous session's fallbacks)."""
        n, runs = ctypes.c_int32(), ctypes.c_int32()
        p = rt.kiln_session_profile(self._ptr, ctypes.byref(n), ctypes.byref(runs))
        if not p:
            return []
        return [{"kernel": _str(p[i].kernel), "node": _str(p[i].node), "op": _str(p[i].op),
                 "total_s": p[i].total_s, "last_s": p[i].last_s, "start_s": p[i].start_s,
                 "flops": p[i].flops, "bytes": p[i].bytes, "runs": runs.value, "device": _str(p[i].device)}
                for i in range(n.value)]

    def close(self):
        if getattr(self, "_ptr", None):
            rt.kiln_session_destroy(self._ptr)
            self._ptr = None
        if getattr(self, "_dev", None):
            rt.kiln_device_release(self._dev)
            self._dev = None


class StagedModel:
    """A compiled model that runs in stages: data-dependent shapes (NonZero, NonMaxSuppression,
    Unique, Compress, TopK with a run-time K) or control flow (If, Loop, Scan). Its host nodes run
    on the host, the runs of nodes between them are compiled for the target when a run first meets
    their input shapes and cached per shape (kiln/compiler.h, "staged models"). Where every
    stage's inputs have fixed sizes and the host nodes are ones libkiln_rt runs, it also has a
    .kiln form, the staged module `kiln compile` writes: module() loads it, save() writes it;
    otherwise both raise KilnError naming the first host node and why. Output dims that depend on
    data are None in .outputs."""

    def __init__(self, compiler, target, report, name="<memory>"):
        self._c = compiler  # owned: the staged graph lives in it until the last session ends
        self.target = target
        self.name = name
        self.report = report
        self.host_nodes = cc.kiln_compiler_host_nodes(compiler)
        self.inputs = [self._io(0, i) for i in range(cc.kiln_compiler_staged_count(compiler, 0))]
        self.outputs = [self._io(1, i) for i in range(cc.kiln_compiler_staged_count(compiler, 1))]

    def _io(self, output, i):
        dt, shape = ctypes.c_int(), _lib.Shape()
        name = cc.kiln_compiler_staged_io(self._c, output, i, ctypes.byref(dt), ctypes.byref(shape))
        dims = tuple(int(shape.dims[d]) if shape.dims[d] >= 0 else None for d in range(shape.rank))
        return {"name": _str(name), "shape": dims, "dtype": np.dtype(_DTYPES[dt.value]), "kiln_dtype": dt.value}

    @property
    def data(self):
        """The staged module's .kiln bytes (KilnError where the model has none)."""
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        _check(cc.kiln_compiler_module(self._c, ctypes.byref(data), ctypes.byref(size)))
        return ctypes.string_at(data, size.value)

    def module(self):
        """The staged module as a kiln.Module (its sessions run it as kiln.load's do)."""
        return Module(self.data, name=self.name, report=self.report)

    def save(self, path):
        """Writes the staged module (what kiln.load, `kiln run` and `kiln-rt-run` read)."""
        blob = self.data
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)

    def session(self, device=None):
        """A runner on |device| ("cpu", "opencl:1", ...; default: the target's first device)."""
        return StagedSession(self, device)

    def __del__(self):
        if getattr(self, "_c", None):
            cc.kiln_compiler_destroy(self._c)
            self._c = None


class StagedSession(_Closing):
    """Runs a StagedModel on a device. Not thread-safe: one per thread."""

    def __init__(self, model, device=None):
        self._ptr = None
        self.model = model
        r = ctypes.c_void_p()
        _check(cc.kiln_compiler_runner_create(model._c, device.encode() if device else None, ctypes.byref(r)))
        self._ptr = r
        self._in = (Array * max(len(model.inputs), 1))()
        self._out = (Array * max(len(model.outputs), 1))()

    def run(self, inputs):
        """As Session.run: outputs have the sizes this run's data gave them."""
        keep = _marshal(inputs, self.model.inputs, self._in)
        _check(cc.kiln_compiler_runner_run(self._ptr, self._in, self._out))
        del keep
        return _collect(self._out, len(self.model.outputs))

    def stats(self):
        """What the runner did so far: {"stages", "host_nodes", "compiles", "reuses",
        "on_reference", "host_s", "compile_s"}."""
        st = _lib.RunnerStats()
        cc.kiln_compiler_runner_stats(self._ptr, ctypes.byref(st))
        return {f: getattr(st, f) for f, _ in _lib.RunnerStats._fields_}

    def close(self):
        if getattr(self, "_ptr", None):
            cc.kiln_compiler_runner_destroy(self._ptr)
            self._ptr = None


def compile(model, target="cpu", precision="fp32", opt_level=1, dims=None, **options):
    """Compiles the ONNX file |model| for |target| ("cpu", "opencl", "vulkan") and returns the Module,
    or a StagedModel for a model with data-dependent shapes or control flow (StagedModel.save()
    writes its staged module where it has one).

    dims: {symbol: size} for symbolic input dimensions (the rest become 1). Other options are
    kiln/compiler.h's, with _ for - (threads=4, fp16_arith="yes", calibrate="dir", ...).
    The compile report is Module.report, a list of {"section", "key", "value", "text"} dicts."""
    c = ctypes.c_void_p()
    _check(cc.kiln_compiler_create(_lib.COMPILER_ABI_VERSION, ctypes.byref(c)))
    try:
        _check(cc.kiln_compiler_load_model(c, os.fspath(model).encode()))
        opts = [("target", target), ("precision", precision), ("opt-level", str(opt_level))]
        opts += [("dim", f"{k}={v}") for k, v in (dims or {}).items()]
        for k, v in options.items():
            if isinstance(v, bool):
                v = "yes" if v else "no"
            opts.append((k.replace("_", "-"), str(v)))
        for k, v in opts:
            _check(cc.kiln_compiler_set_option(c, k.encode(), v.encode()))
        _check(cc.kiln_compiler_compile(c))
        report = []
        for i in range(cc.kiln_compiler_report_count(c)):
            e = cc.kiln_compiler_report_at(c, i).contents
            report.append({"section": _str(e.section), "key": _str(e.key), "value": e.value, "text": _str(e.text)})
        if cc.kiln_compiler_host_nodes(c) > 0:
            staged, c = StagedModel(c, target, report, os.fspath(model)), None  # the model owns the compiler now
            return staged
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        _check(cc.kiln_compiler_module(c, ctypes.byref(data), ctypes.byref(size)))
        blob = ctypes.string_at(data, size.value)
    finally:
        if c:
            cc.kiln_compiler_destroy(c)
    return Module(blob, name=os.fspath(model), report=report)


def load_plugin(path):
    """Loads a custom-op plugin (include/kiln/custom_op.h) for compiling and for running modules
    that use its ops: the process has one plugin registry, libkiln_rt's, which libkiln uses too."""
    _check(rt.kiln_plugin_load(os.fspath(path).encode()))


def load(path):
    """Loads a .kiln module file: mapped by the runtime, its weights used where they lie (a CPU
    session copies none), so the file must not be truncated while the module lives."""
    return Module(None, name=os.fspath(path), path=path)


def devices():
    """The devices this kiln can run on: a list of dicts {"name": "opencl:0", "api", "index",
    "description"}; an API without a driver or device adds {"api", "error"} instead."""
    out = []
    for i in range(rt.kiln_device_api_count()):
        api = _str(rt.kiln_device_api_name_at(i))
        text = ctypes.c_void_p()
        st = rt.kiln_device_api_list(i, ctypes.byref(text))
        if st:
            msg = rt.kiln_status_message(st).decode(errors="replace")
            rt.kiln_status_free(st)
            out.append({"api": api, "error": msg})
            continue
        lines = ctypes.string_at(text).decode(errors="replace").splitlines()
        rt.kiln_free(text)
        # one line per device: "[N] description" or "api:N  description"
        for line in lines:
            line = line.strip()
            idx, desc = None, ""
            if line.startswith("[") and "]" in line:
                idx, desc = line[1:].split("]", 1)
            elif line.startswith(api + ":"):
                idx, _, desc = line[len(api) + 1:].partition(" ")
            if idx is not None and idx.isdigit():
                out.append({"name": f"{api}:{idx}", "api": api, "index": int(idx), "description": desc.strip()})
    return out
