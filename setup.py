"""Builds the compiled part of the smb package for pip (pyproject.toml).

smb._core is a pybind11 module over libsmb; CMake builds it, as it does for
the Debian package. The wheel carries it with the two libraries it links
(libsmb.so.0, libsmb-engine.so.0) beside it, found through an $ORIGIN
runpath, so that a virtual environment needs nothing of this repository
once installed. UCX, rdma-core and the C++ runtime stay the system's.
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"project\(smb VERSION ([0-9.]+)", f.read())
    if not match:
        raise RuntimeError("no project(smb VERSION ...) in CMakeLists.txt")
    return match.group(1)


def run(command):
    print("+", shlex.join(command), flush=True)
    subprocess.run(command, check=True)


class CMakeBuild(build_ext):
    """Builds smb._core with CMake and copies it, with its libraries, into the package."""

    def build_extension(self, ext):
        build_dir = os.environ.get("SMB_BUILD_DIR")
        if build_dir:
            if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
                raise RuntimeError(f"SMB_BUILD_DIR={build_dir} is not a configured CMake build tree")
        else:
            build_dir = os.path.join(os.path.abspath(self.build_temp), "cmake")
            run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DSMB_BUILD_TESTS=OFF",
                 f"-DPython3_EXECUTABLE={sys.executable}"] + shlex.split(os.environ.get("SMB_CMAKE_ARGS", "")))
        jobs = str(os.cpu_count() or 1)
        run(["cmake", "--build", build_dir, "--target", "smb_python_core", "--parallel", jobs])
        modules = glob.glob(os.path.join(build_dir, "python", "smb", "_core*.so"))
        if len(modules) != 1:
            raise RuntimeError(f"expected one smb/_core module in {build_dir}/python, found {modules}: was the "
                               "tree configured with Python (pybind11-dev, python3-dev)?")
        destination = os.path.dirname(self.get_ext_fullpath(ext.name))
        os.makedirs(destination, exist_ok=True)
        copies = [shutil.copyfile(modules[0], self.get_ext_fullpath(ext.name))]
        for library in ("smb-client/libsmb.so.0", "smb-engine/libsmb-engine.so.0"):
            copies.append(shutil.copyfile(os.path.join(build_dir, library),  # follows the soname link
                                          os.path.join(destination, os.path.basename(library))))
        for copy in copies:  # each finds the others beside it
            os.chmod(copy, 0o755)
            run(["cmake", f"-DFILE={copy}", "-P", os.path.join(ROOT, "cmake", "SetOriginRunpath.cmake")])


setup(
    version=project_version(),
    ext_modules=[Extension("smb._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    package_data={"smb": ["*.so.0"]},
    zip_safe=False,
)
