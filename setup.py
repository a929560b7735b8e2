"""The wheel carries the native parts (native/), compiled while the wheel is built.

pyproject.toml holds the metadata; this file only adds the build step: `make -C native`
into a scratch directory, its outputs copied to mallocbench/_native/, where
mallocbench.native finds them without a checkout. An editable install (`make setup`)
skips it: a checkout uses native/build.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

NATIVE = Path(__file__).resolve().parent / "native"
# Without these three the installed command cannot record, replay or run patterns.
REQUIRED = ("libmbrecord.so", "mbreplay", "mbpatterns")


class BuildWithNative(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "mallocbench" / "_native"
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="mallocbench-native-") as scratch:
            subprocess.run(["make", "-s", "-C", str(NATIVE), f"BUILD={scratch}"], check=True)
            built = sorted(Path(scratch).iterdir())
            missing = [name for name in REQUIRED if not (Path(scratch) / name).is_file()]
            if missing:
                raise SystemExit(
                    f"native build made no {', '.join(missing)}: install libzstd-dev and a C "
                    "compiler (scripts/install-deps.sh)"
                )
            for path in built:
                shutil.copy2(path, target / path.name)


class BinaryDistribution(Distribution):
    """Native executables inside: the wheel is tagged for this platform, not pure."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildWithNative}, distclass=BinaryDistribution)
