from __future__ import annotations

import sys

from toolchain.cli import main

sys.exit(main())
