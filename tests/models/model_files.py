"""File helpers shared by the model export scripts (export_encoder.py,
export_vit.py, export_archetypes.py): where a model's files go, whether an
earlier export is still current, and writing .npy files atomically.

An export is current when every file exists and is newer than the script
that wrote it (so editing an exporter re-exports its models). Files are
written under a temporary name and renamed, so an interrupted run never
leaves a truncated file that looks up to date.
"""

import os

import numpy as np


def outputs(out_dir, name):
    """The three files of a single-input, single-output model export."""
    return {
        "onnx": os.path.join(out_dir, f"{name}.onnx"),
        "input": os.path.join(out_dir, f"{name}_input.npy"),
        "ort": os.path.join(out_dir, f"{name}_ort.npy"),
    }


def up_to_date(paths, script):
    """True when every path exists and is newer than `script` (its exporter)."""
    script_mtime = os.path.getmtime(os.path.abspath(script))
    return all(os.path.isfile(p) and os.path.getmtime(p) > script_mtime for p in paths)


def save_npy(path, array):
    tmp = path + ".tmp.npy"
    np.save(tmp, array)
    os.replace(tmp, path)
