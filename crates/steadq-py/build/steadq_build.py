"""The PEP 517 backend of the steadq wheel: maturin's, with the `steadq` binary built first.

maturin packs one Rust artifact per wheel with PyO3 bindings (the extension module); the
command is another crate's binary (the root package, steadq-cli). So before maturin builds the
wheel, this builds that binary with cargo (profile `python`, the one maturin uses for the
module, so the steadq library is compiled once for both) and puts it in the wheel's data
directory, `scripts/steadq`, which pip installs into the environment's bin/ as it is: the
real executable on PATH, no Python wrapper in front of it.
"""

import os
import shutil
import subprocess
from pathlib import Path

import maturin
from maturin import (  # noqa: F401  (the rest of the PEP 517 interface, as maturin has it)
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
)

ROOT = Path(__file__).resolve().parents[3]
PROFILE = "python"
DATA = ROOT / "target" / "steadq-py-data"


def _build_command():
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "build", "--profile", PROFILE, "-p", "steadq-cli", "--bin", "steadq"]
    subprocess.run(cmd, cwd=ROOT, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if not target.is_absolute():
        target = ROOT / target
    built = target / PROFILE / "steadq"
    _data_dir()
    dest = DATA / "scripts" / "steadq"
    shutil.copy2(built, dest)
    dest.chmod(0o755)


def _data_dir():
    # maturin checks that the data directory exists whenever it reads pyproject.toml.
    (DATA / "scripts").mkdir(parents=True, exist_ok=True)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _data_dir()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    _data_dir()
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_sdist(sdist_directory, config_settings=None):
    # maturin's sdist holds the module's crate and its path dependencies, not the root
    # package the command is built from, so a wheel built from it would have no command.
    raise RuntimeError(
        "steadq: no sdist; build the wheel in a clone of the repository "
        "(pip install ., pip wheel ., python -m build --wheel)"
    )


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _build_command()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _build_command()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
