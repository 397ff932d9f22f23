# SPDX-License-Identifier: Apache-2.0
"""Builds tutti's SWIG module (tutti._tutti_c) against the libtutti that pkg-config finds.

The metadata is in pyproject.toml. SWIG writes the module's Python half (tutti/tutti_c.py)
next to the package, so the extension is built before the package's files are collected.
"""
import shlex
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


def pkg_config(*args: str) -> list:
    try:
        out = subprocess.run(["pkg-config", *args, "tutti"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("pkg-config does not find tutti: install libtutti-dev, or set PKG_CONFIG_PATH "
                         f"to where tutti.pc is ({e})")
    return shlex.split(out)


class BuildExtFirst(build_py):
    def run(self):
        self.run_command("build_ext")  # SWIG makes tutti/tutti_c.py first
        super().run()


cflags = pkg_config("--cflags")
setup(
    cmdclass={"build_py": BuildExtFirst},
    ext_modules=[Extension(
        "tutti._tutti_c",
        sources=["tutti_c.i"],
        swig_opts=["-outdir", "tutti"] + [f for f in cflags if f.startswith("-I")],
        extra_compile_args=cflags + ["-w"],  # generated code
        extra_link_args=pkg_config("--libs"),
    )],
)
