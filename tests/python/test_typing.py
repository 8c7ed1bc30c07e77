"""The package's type annotations, as a user's type checker sees them (mypy).

mypy checks the package with --disallow-untyped-defs --disallow-incomplete-defs
--warn-return-any (every function annotated, nothing typed Any handed back as a typed
result), and typed_usage.py, a program of the public API: each of its reveal_type() lines must
reveal the type its comment names (so `a @ b` must stay an Array, `accel.matmul(...)` a
Future[Array]), and each line of its rejected() must be an error mypy reports. Then the
program's run() runs against the real context with reveal_type recording what it is given:
every value must be of the type mypy revealed for its line (a Future's result too), so the
annotations are checked against what the package does, in-process and through acceld. The
Python of the READMEs and examples/python/ must type-check as printed.

mypy is part of what the tests need (python3-mypy, scripts/deps): without it this fails.
"""
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import accel
import typed_usage

FLAGS = ["--disallow-untyped-defs", "--disallow-incomplete-defs", "--warn-return-any"]
USAGE = os.path.abspath(typed_usage.__file__)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(accel.__file__)))
# In typed_usage only: an ignore that no longer hides an error is one (rejected()).
CONFIG = "[mypy]\n\n[mypy-typed_usage]\nwarn_unused_ignores = True\n"
NOTE = re.compile(r'^(?P<path>.+?):(?P<line>\d+): (?P<kind>note|error): (?P<text>.*)$')
REVEALED = re.compile(r'^Revealed type is "(?P<type>.*)"$')


def expected_reveals():
    """{line: the type its comment names} for every reveal_type() line of typed_usage.py."""
    out = {}
    with open(USAGE) as f:
        for n, line in enumerate(f, 1):
            if line.lstrip().startswith("reveal_type("):
                want = line.partition("  # ")[2].strip()
                assert want, f"typed_usage.py:{n}: a reveal_type line names no type"
                out[n] = want
    return out


def need_mypy():
    if importlib.util.find_spec("mypy") is None:
        pytest.fail(f"mypy is not installed for {sys.executable}: the typing tests need it "
                    "(Debian's python3-mypy; scripts/deps installs it)")


def run_mypy(tmp_path):
    need_mypy()
    config = tmp_path / "mypy.ini"
    config.write_text(CONFIG)
    cmd = [sys.executable, "-m", "mypy", *FLAGS, "--config-file", str(config),
           "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", "accel", USAGE]
    got = subprocess.run(cmd, cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=240)
    return got.returncode, got.stdout + got.stderr


def test_package_and_usage_type_check(tmp_path):
    rc, output = run_mypy(tmp_path)
    reveals, others = {}, []
    for line in output.splitlines():
        m = NOTE.match(line)
        r = REVEALED.match(m["text"]) if m and m["kind"] == "note" else None
        if r and os.path.abspath(os.path.join(PACKAGE_ROOT, m["path"])) == USAGE:
            reveals[int(m["line"])] = r["type"]
        elif line.strip():
            others.append(line)
    assert rc == 0 and not others, f"mypy {' '.join(FLAGS)} (exit {rc}):\n" + "\n".join(others)
    want = expected_reveals()
    assert len(want) >= 50, "typed_usage.py lost its reveal_type lines"
    wrong = {n: (want.get(n), reveals.get(n)) for n in want.keys() | reveals.keys()
             if want.get(n) != reveals.get(n)}
    assert not wrong, "typed_usage.py line: (its comment, mypy's revealed type):\n" + \
        "\n".join(f"  {n}: {w}" for n, w in sorted(wrong.items()))


def test_rejections_are_errors(tmp_path):
    """The check can fail: without its ignores, every line of rejected() is an error."""
    need_mypy()
    with open(USAGE) as f:
        source = f.read()
    body, lines = inspect.getsourcelines(typed_usage.rejected)
    first = lines + 1  # the def line itself carries no ignore
    plain = [re.sub(r"  # type: ignore\[[a-z-]+\]$", "", line.rstrip("\n")) for line in body]
    changed = tmp_path / "typed_usage.py"
    text = source.splitlines()
    text[lines - 1:lines - 1 + len(body)] = plain
    changed.write_text("\n".join(text) + "\n")
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n")
    got = subprocess.run([sys.executable, "-m", "mypy", *FLAGS, "--config-file", str(config),
                          "--cache-dir", str(tmp_path / "cache"), str(changed)],
                         cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=240)
    errors = {int(m["line"]) for m in map(NOTE.match, got.stdout.splitlines())
              if m and m["kind"] == "error"}
    rejected = set(range(first, lines + len(body)))
    assert errors == rejected, f"errors on lines {sorted(errors)}, expected {sorted(rejected)}" \
        f":\n{got.stdout}"


def test_documented_examples_type_check(tmp_path):
    """The Python of both READMEs and examples/python/ passes mypy as it stands: the types
    refuse none of the documented uses."""
    need_mypy()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files = []
    for readme in ("README.md", os.path.join("clients", "python", "README.md")):
        with open(os.path.join(root, readme)) as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
        assert blocks, f"{readme} has no Python example"
        for i, block in enumerate(blocks):
            path = tmp_path / f"{readme.replace(os.sep, '_')[:-3]}_{i}.py"
            path.write_text(block)
            files.append(str(path))
    examples = os.path.join(root, "examples", "python")
    files += sorted(os.path.join(examples, f) for f in os.listdir(examples) if f.endswith(".py"))
    assert len(files) >= 8
    got = subprocess.run([sys.executable, "-m", "mypy", "--disallow-incomplete-defs",
                          "--warn-return-any", "--config-file", os.devnull,
                          "--cache-dir", str(tmp_path / "cache"), *files],
                         cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=240)
    assert got.returncode == 0, got.stdout + got.stderr


def test_every_module_is_installed():
    """meson installs the package from a list of its files: a module missing there (one
    imported for type checkers only, say) would leave an installed package whose types do
    not resolve."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "clients", "python", "meson.build")) as f:
        listed = set(re.findall(r"'accel/([^']+)'", f.read()))
    package = os.path.join(root, "clients", "python", "accel")
    present = {f for f in os.listdir(package) if f.endswith(".py") or f == "py.typed"}
    assert "_types.py" in present and "__init__.py" in present
    assert listed == present


# ---- the revealed types against the values --------------------------------------------------

def _split(args):
    """'A, B[C, D], E' -> ['A', 'B[C, D]', 'E']."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(args):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(args[start:i].strip())
            start = i + 1
    parts.append(args[start:].strip())
    return parts


def _class(dotted):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def matches(value, typ):
    """Whether `value` is of mypy's type `typ` (the forms typed_usage.py reveals); a Future's
    result is checked against its parameter."""
    if typ in ("Any", "Any, ..."):
        return True
    if typ == "None":
        return value is None
    name, _, args = typ.partition("[")
    args = _split(args[:-1]) if args else []
    if name == "Union":
        return any(matches(value, t) for t in args)
    if not isinstance(value, _class(name)):
        return False
    if name in ("builtins.list", "builtins.tuple") and args:
        return all(matches(v, args[0]) for v in value)
    if name == "accel._future.Future":
        return matches(value.result(), args[0])
    if name == "numpy.ndarray":
        return isinstance(value.dtype, np.dtype)
    return True


def test_matches_can_fail():
    assert matches([1, 2], "builtins.list[builtins.int]")
    assert not matches([1, "2"], "builtins.list[builtins.int]")
    assert not matches(1.5, "accel._array.Array")
    assert matches(None, "Union[builtins.str, None]")
    assert not matches(b"x", "Union[builtins.str, None]")


def test_revealed_types_hold_at_run_time(ctx, monkeypatch):
    seen = []

    def record(value):
        seen.append((sys._getframe(1).f_lineno, value))
        return value

    monkeypatch.setattr(typed_usage, "reveal_type", record)
    typed_usage.run(ctx)
    want = expected_reveals()
    body, first = inspect.getsourcelines(typed_usage.run)
    in_run = {n for n in want if first <= n < first + len(body)}
    assert {n for n, _ in seen} == in_run, "reveal_type lines of run() that did not run"
    wrong = [(n, want[n], type(v).__name__) for n, v in seen if not matches(v, want[n])]
    assert not wrong, f"(line, revealed type, value's type): {wrong}"
