"""auditwheel for another machine's wheel: `python -m toolchain.compile.auditwheel_cross MACHINE`.

auditwheel 6.8 takes the machine whose manylinux policies apply from platform.machine()
(Architecture.detect) and refuses to repair a wheel of another one. Everything else it does
reads the wheel's own ELF files (their machine, their symbol versions), so telling it the wheel's
machine is the whole change; the rest of the command line is auditwheel's own.
"""

from __future__ import annotations

import platform
import sys


def main() -> int:
    machine = sys.argv.pop(1)
    platform.machine = lambda: machine  # what auditwheel asks for the policies' machine
    from auditwheel.main import main as auditwheel_main  # type: ignore[import-untyped]

    return int(auditwheel_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
