"""The Python examples run and check themselves (in-process and through acceld, as the
`url` fixture says): examples/python/arrays.py, the numpy-style code of the Quick start."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_arrays_example_matches_numpy_on_every_device(url):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "arrays.py"),
                          url], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines and all(line.endswith(", ok") for line in lines), run.stdout
