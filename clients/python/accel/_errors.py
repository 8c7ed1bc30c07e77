"""accel's errors as Python exceptions."""
from __future__ import annotations

from . import _lib


class AccelError(Exception):
    """An accel call or op failed.

    Attributes:
        code: accel's negative error code (accel/error.h), e.g. -1.
        name: its symbolic name without the prefix, e.g. "EINVAL".
        strerror: accel's message for the code.
        detail: what failed ("accel_gemm", or a module's build log), or None.
    """

    def __init__(self, code: int, detail: str | None = None) -> None:
        self.code = int(code)
        self.name = _lib.lib.accel_err_name(self.code).decode()
        self.strerror = _lib.lib.accel_strerror(self.code).decode()
        self.detail = detail
        text = f"{self.name}: {self.strerror}"
        if detail:
            text += f" ({detail})"
        super().__init__(text)


def check(rc: int, what: str) -> int:
    """Raises AccelError for a negative return code, with the C library's words on why when it
    has some (accel_last_error_detail, read on this thread right after the call); returns rc
    otherwise."""
    if rc < 0:
        why = _lib.lib.accel_last_error_detail().decode(errors="replace")
        raise AccelError(rc, f"{what}: {why}" if why else what)
    return rc
