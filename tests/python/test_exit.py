"""The interpreter exits promptly, with status 0, when a script ends with ops still running:
futures kept, dropped, or waiting to call back. The contexts are closed at exit (their ops
end first), a Future collected while the interpreter finalizes starts no thread, and the
callbacks of ops that ended run before the callback thread stops."""
import time

import pytest

from subproc import CHAIN, Child

ENDINGS = {
    # Every future kept until the interpreter finalizes, where they are collected.
    "kept": "",
    # Dropped while their ops run; the last one's callback must still run, before exit.
    "dropped": """
chain[-1].add_done_callback(lambda f: print("callback", f.result() is c, flush=True))
del chain
""",
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_script_ending_with_ops_running_exits_at_once(url, ending):
    body = "SECONDS = 0.5\n" + CHAIN + ENDINGS[ending]
    child = Child(body + 'print("issued", time.monotonic(), flush=True)\n', url)
    issued = float(child.line().split()[1])
    status = child.wait(30)  # a hang (thread started while finalizing, OpenBLAS) fails here
    took = time.monotonic() - issued
    print(f"exited {took:.2f} s after its last op was issued")
    assert status == 0, child.stderr()
    assert "Traceback" not in child.stderr() and "Exception ignored" not in child.stderr()
    if ending == "dropped":
        assert child.line() == "callback True"
    assert took < 10, "the exit waits for the ops (about 0.5 s of them), not more"
