"""`pip install .`: builds ctrbox's Python module with CMake from Debian's packages (nothing is
downloaded; scripts/setup installs them) and installs the `ctrbox` package (docs/python.md).

    python3 -m venv --system-site-packages .venv && .venv/bin/pip install .

CTRBOX_BUILD_DIR=DIR builds in an existing CMake build tree (e.g. build/, which scripts/setup
made) instead of a fresh one, so only the module is compiled."""
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("CTRBOX_BUILD_DIR")
        if build:
            # A build tree of its own: configured as it is (its Python must be this one).
            if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
                sys.exit("setup.py: CTRBOX_BUILD_DIR={} is not a CMake build tree".format(build))
        else:
            build = os.path.join(os.path.abspath(self.build_temp), "cmake")
            subprocess.run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DCTRBOX_PYTHON=ON",
                            "-DPython_EXECUTABLE=" + sys.executable], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "_ctrbox", "-j", str(os.cpu_count() or 1)], check=True)
        built = os.path.join(build, "python", "ctrbox", "_ctrbox" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not os.path.exists(built):
            sys.exit("setup.py: no {} in {}: that tree was built for another Python than {}".format(
                os.path.basename(built), build, sys.executable))
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copyfile(built, out)

setup(
    name="ctrbox",
    version="0.1.0",
    description="Train CTR models whose sparse embedding tables outgrow GPU and CPU memory",
    packages=["ctrbox"],
    package_dir={"": "python"},
    ext_modules=[Extension("ctrbox._ctrbox", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=["numpy"],
    python_requires=">=3.9",
    options={"build": {"build_base": "build-pip"}, "egg_info": {"egg_base": "build-pip"}},
)
