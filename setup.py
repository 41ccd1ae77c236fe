"""Only the compiled data plane lives here (setup.cfg cannot declare extensions); everything
else is in setup.cfg. The extension is optional: without a C++17 compiler the install goes on
and netstorm runs its Python data path (docs/dataplane.md)."""
import glob

from setuptools import setup

try:
    from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
except ImportError:         # pip's build isolation always brings it; a bare setup.py may not
    ext_modules, cmdclass = [], {}
else:
    ext_modules = [Pybind11Extension(
        "netstorm.geoserver._dataplane", sorted(glob.glob("geoserver/native/*.cpp")),
        cxx_std=17, extra_compile_args=["-O3", "-fvisibility=hidden", "-fno-math-errno"],
        libraries=["dl"])]
    for ext in ext_modules:
        ext.optional = True         # no compiler: install the Python path, and say so
    cmdclass = {"build_ext": build_ext}
    ParallelCompile("NETSTORM_BUILD_JOBS").install()     # one compiler per core

setup(ext_modules=ext_modules, cmdclass=cmdclass)
