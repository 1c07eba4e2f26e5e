"""Finding and declaring kiln's shared libraries (ctypes).

Search order for libkiln_rt.so and libkiln.so:
  1. the folder in $KILN_LIBRARY_PATH;
  2. a build tree of the checkout this package was imported from
     (<checkout>/build), when importing from python/ of a checkout;
  3. the system loader (LD_LIBRARY_PATH, ld.so.conf: an install into
     /usr/local with `cmake --install build`), then <prefix>/lib for the
     prefixes /usr/local and sys.prefix.
"""
import ctypes
import os
import sys

KILN_MAX_RANK = 8
COMPILER_ABI_VERSION = 1  # KILN_COMPILER_ABI_VERSION this package speaks


class Allocator(ctypes.Structure):
    _fields_ = [("self", ctypes.c_void_p), ("alloc", ctypes.c_void_p),
                ("realloc", ctypes.c_void_p), ("free", ctypes.c_void_p)]


class Shape(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int32), ("dims", ctypes.c_int64 * KILN_MAX_RANK)]


class Array(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("shape", Shape),
                ("data", ctypes.c_void_p), ("nbytes", ctypes.c_size_t)]


class SessionOptions(ctypes.Structure):
    _fields_ = [("slots", ctypes.c_int32), ("profile", ctypes.c_bool),
                ("cache_dir", ctypes.c_char_p), ("dump_dir", ctypes.c_char_p),
                ("threads", ctypes.c_int32), ("dim_reserve", ctypes.c_int64),
                ("build_progress", ctypes.c_void_p), ("reuse_code", ctypes.c_bool)]


class DeviceOpenOptions(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int32), ("strict", ctypes.c_bool), ("log", ctypes.c_void_p)]


class ModuleInfo(ctypes.Structure):
    _fields_ = [("model_name", ctypes.c_char_p), ("target", ctypes.c_char_p),
                ("precision", ctypes.c_char_p), ("options", ctypes.c_char_p),
                ("n_inputs", ctypes.c_int32), ("n_outputs", ctypes.c_int32),
                ("n_kernels", ctypes.c_int32), ("n_buffers", ctypes.c_int32),
                ("weights_bytes", ctypes.c_uint64), ("code_bytes", ctypes.c_uint64),
                ("format_version", ctypes.c_uint32), ("signer_key_id", ctypes.c_char_p),
                ("signature_verified", ctypes.c_bool)]


class ProfileEntry(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_char_p), ("node", ctypes.c_char_p), ("op", ctypes.c_char_p),
                ("total_s", ctypes.c_double), ("start_s", ctypes.c_double),
                ("last_s", ctypes.c_double), ("flops", ctypes.c_int64), ("bytes", ctypes.c_int64),
                ("device", ctypes.c_char_p)]


class RunnerStats(ctypes.Structure):
    _fields_ = [("stages", ctypes.c_int32), ("host_nodes", ctypes.c_int32), ("compiles", ctypes.c_int32),
                ("reuses", ctypes.c_int32), ("on_reference", ctypes.c_int32), ("host_s", ctypes.c_double),
                ("compile_s", ctypes.c_double)]


class ReportEntry(ctypes.Structure):
    _fields_ = [("section", ctypes.c_char_p), ("key", ctypes.c_char_p),
                ("value", ctypes.c_double), ("text", ctypes.c_char_p)]


def _candidates(name):
    env = os.environ.get("KILN_LIBRARY_PATH")
    if env:
        yield os.path.join(env, name)
    here = os.path.dirname(os.path.abspath(__file__))
    checkout_build = os.path.normpath(os.path.join(here, "..", "..", "build"))
    yield os.path.join(checkout_build, name)
    yield name  # the system loader
    for prefix in ("/usr/local", sys.prefix):
        yield os.path.join(prefix, "lib", name)


def _open(name):
    tried = []
    for path in _candidates(name):
        if os.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError(f"kiln: cannot find {name}; set KILN_LIBRARY_PATH to the folder holding it "
                      f"(a build tree or <prefix>/lib). Tried: " + "; ".join(tried))


def _declare(lib, name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


P = ctypes.c_void_p
PP = ctypes.POINTER(ctypes.c_void_p)

rt = _open("libkiln_rt.so")
_declare(rt, "kiln_status_message", ctypes.c_char_p, P)
_declare(rt, "kiln_status_code", ctypes.c_int, P)
_declare(rt, "kiln_status_code_name", ctypes.c_char_p, ctypes.c_int)
_declare(rt, "kiln_status_free", None, P)
_declare(rt, "kiln_allocator_system", Allocator)
_declare(rt, "kiln_module_load_memory", P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, Allocator, PP)
_declare(rt, "kiln_module_load_file", P, ctypes.c_char_p, Allocator, PP)
_declare(rt, "kiln_module_release", None, P)
_declare(rt, "kiln_module_info", None, P, ctypes.POINTER(ModuleInfo))
_declare(rt, "kiln_module_input_name", ctypes.c_char_p, P, ctypes.c_int32)
_declare(rt, "kiln_module_output_name", ctypes.c_char_p, P, ctypes.c_int32)
_declare(rt, "kiln_module_input_shape", Shape, P, ctypes.c_int32, ctypes.POINTER(ctypes.c_int))
_declare(rt, "kiln_module_output_shape", Shape, P, ctypes.c_int32, ctypes.POINTER(ctypes.c_int))
_declare(rt, "kiln_device_open", P, ctypes.c_char_p, ctypes.POINTER(DeviceOpenOptions), Allocator, PP)
_declare(rt, "kiln_device_release", None, P)
_declare(rt, "kiln_device_api", ctypes.c_char_p, P)
_declare(rt, "kiln_device_name", ctypes.c_char_p, P)
_declare(rt, "kiln_device_api_count", ctypes.c_int32)
_declare(rt, "kiln_device_api_name_at", ctypes.c_char_p, ctypes.c_int32)
_declare(rt, "kiln_device_api_list", P, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
_declare(rt, "kiln_free", None, P)
_declare(rt, "kiln_session_options_default", None, ctypes.POINTER(SessionOptions))
_declare(rt, "kiln_session_create", P, P, P, ctypes.POINTER(SessionOptions), PP)
_declare(rt, "kiln_session_destroy", None, P)
_declare(rt, "kiln_session_run", P, P, ctypes.POINTER(Array), ctypes.POINTER(Array))
_declare(rt, "kiln_session_profile", ctypes.POINTER(ProfileEntry), P, ctypes.POINTER(ctypes.c_int32),
         ctypes.POINTER(ctypes.c_int32))
_declare(rt, "kiln_array_free", None, Allocator, ctypes.POINTER(Array))
_declare(rt, "kiln_plugin_load", P, ctypes.c_char_p)

cc = _open("libkiln.so")
_declare(cc, "kiln_version", ctypes.c_char_p)
_declare(cc, "kiln_compiler_abi_version", ctypes.c_int32)
_declare(cc, "kiln_compiler_create", P, ctypes.c_int32, PP)
_declare(cc, "kiln_compiler_destroy", None, P)
_declare(cc, "kiln_compiler_load_model", P, P, ctypes.c_char_p)
_declare(cc, "kiln_compiler_load_plugin", P, ctypes.c_char_p)
_declare(cc, "kiln_compiler_set_option", P, P, ctypes.c_char_p, ctypes.c_char_p)
_declare(cc, "kiln_compiler_compile", P, P)
_declare(cc, "kiln_compiler_module", P, P, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t))
_declare(cc, "kiln_compiler_report_count", ctypes.c_int32, P)
_declare(cc, "kiln_compiler_report_at", ctypes.POINTER(ReportEntry), P, ctypes.c_int32)
_declare(cc, "kiln_compiler_host_nodes", ctypes.c_int32, P)
_declare(cc, "kiln_compiler_staged_count", ctypes.c_int32, P, ctypes.c_int32)
_declare(cc, "kiln_compiler_staged_io", ctypes.c_char_p, P, ctypes.c_int32, ctypes.c_int32,
         ctypes.POINTER(ctypes.c_int), ctypes.POINTER(Shape))
_declare(cc, "kiln_compiler_runner_create", P, P, ctypes.c_char_p, PP)
_declare(cc, "kiln_compiler_runner_destroy", None, P)
_declare(cc, "kiln_compiler_runner_run", P, P, ctypes.POINTER(Array), ctypes.POINTER(Array))
_declare(cc, "kiln_compiler_runner_stats", None, P, ctypes.POINTER(RunnerStats))

SYSTEM_ALLOCATOR = rt.kiln_allocator_system()
