"""The one compiled part of the CPU target: the foreign call of small requests
(silvanforge_target_cpu/_smallcall.c).  Optional: where it cannot be built (no C compiler,
Python or NumPy headers), the target installs without it and small requests call through ctypes.

NumPy's headers (``numpy.get_include()``) declare the ufunc object whose float64 exp loop the
call runs; numpy is a build requirement (pyproject.toml), and a build without it (no build
isolation, numpy missing) leaves the extension out rather than failing."""

from setuptools import Extension, setup

try:
    import numpy
except ImportError:  # only where build isolation is off and numpy is not installed
    numpy = None

setup(ext_modules=[] if numpy is None else [Extension(
    "silvanforge_target_cpu._smallcall",
    sources=["silvanforge_target_cpu/_smallcall.c"],
    include_dirs=[numpy.get_include()],
    extra_compile_args=["-O2", "-ffp-contract=off"],  # IEEE operations as NumPy rounds them
    optional=True,
)])
