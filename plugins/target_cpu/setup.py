"""The one compiled part of the CPU target: the foreign call of small requests
(silvanforge_target_cpu/_smallcall.c).  Optional: where it cannot be built (no C compiler or
Python headers), the target installs without it and small requests call through ctypes."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "silvanforge_target_cpu._smallcall",
    sources=["silvanforge_target_cpu/_smallcall.c"],
    extra_compile_args=["-O2", "-ffp-contract=off"],  # IEEE operations as NumPy rounds them
    optional=True,
)])
