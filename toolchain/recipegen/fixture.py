"""Cut a test fixture from a real sdist: only the files `new-recipe` reads (its oneDNN callers
among them), and the real hash.

    python -m toolchain.recipegen.fixture SDIST DEST_DIR [RECIPES_DIR]

writes DEST_DIR/vllm-X.tar.gz (those files under vllm-X/) and DEST_DIR/vllm-X.sha256 (the sha256
of the whole real sdist, which the fixture cannot have).
"""

from __future__ import annotations

import sys
from pathlib import Path

from toolchain.plan.onednn_callers import sdist_callers
from toolchain.recipegen.new_recipe import files_read, shipped_patches
from toolchain.recipegen.sdist import SdistFiles, read_sdist, write_fixture
from toolchain.targets import default_recipes_dir
from toolchain.util.files import sha256_file


def cut(sdist: Path, destination: Path, recipes_dir: Path) -> Path:
    top = sdist.name.removesuffix(".tar.gz")
    read = read_sdist(sdist, files_read(shipped_patches(recipes_dir)))
    files = SdistFiles(name=read.name, files={**read.files, **sdist_callers(sdist)})
    destination.mkdir(parents=True, exist_ok=True)
    fixture = destination / sdist.name
    write_fixture(files, top, fixture)
    (destination / f"{top}.sha256").write_text(f"{sha256_file(sdist)}  {sdist.name}\n")
    return fixture


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    folder = Path(sys.argv[3]) if len(sys.argv) == 4 else default_recipes_dir()
    print(cut(Path(sys.argv[1]), Path(sys.argv[2]), folder))
