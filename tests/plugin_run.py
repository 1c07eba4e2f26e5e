"""What the plugin scripts (test_plugin_example.py, test_plugin_api2.py) share:
running one kiln command."""
import os
import subprocess


def run(cmd):
    """Runs |cmd|; returns (exit status, stdout + stderr). Under the sanitizer the
    targets named in KILN_TEST_GPU_NO_LEAK_CHECK run without leak checking
    (tests/plugin_tests.cmake says why)."""
    env = os.environ.copy()
    gpu = [t for t in os.environ.get("KILN_TEST_GPU_NO_LEAK_CHECK", "").split(",") if t]
    if any(t in c for t in gpu for c in cmd):
        env["LSAN_OPTIONS"] = "detect_leaks=0"
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    return p.returncode, p.stdout + p.stderr
